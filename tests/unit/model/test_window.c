/* test_window.c: sliding-window layers keep only their windows' KV rows
 * (kv/kv.h, "Sliding windows"), and a sequence's logits stay the same bits.
 *
 * Every test compares a context whose window layers give rows back (small
 * steps: n_batch 8, so a sequence holds few window slots) with one where
 * they cannot (n_batch 512: the window's bound is the whole context, every
 * layer stored in full), on synthetic models with a window of 7: mistral
 * (every layer), gemma2 (every other layer) and gemma3 (5 of 6). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../../../lib/llm.h"
#include "../../../lib/kv/kvstat.h"
#include "../../../lib/kv/prefix.h"
#include "../../../lib/model/kvstate.h"
#include "../helpers.h"

#define N 400      /* tokens of the long sequence */
#define CTX 512
#define STEP 8

static const char *const shapes[] = {
    "architecture: mistral\nsliding_window: 7\nblock_count: 2\n",
    "architecture: gemma2\nsliding_window: 7\nblock_count: 4\nhead_dim: 32\n",
    "architecture: gemma3\nsliding_window: 7\nblock_count: 6\nhead_dim: 32\n",
};

static struct llm_file *open_file(int which)
{
    char path[512];
    snprintf(path, sizeof path, "%s/window%d.yaml", llm_test_tmpdir(), which);
    FILE *fp = fopen(path, "w");
    cr_assert(fp);
    fputs(shapes[which], fp);
    fputs("embedding_length: 128\nfeed_forward_length: 256\nhead_count: 4\nhead_count_kv: 2\n"
          "vocab_size: 160\ncontext_length: 4096\nrope_theta: 10000.0\nrms_norm_eps: 1e-5\n"
          "tie_embeddings: true\n",
          fp);
    fclose(fp);
    struct llm_file *f;
    llm_status s = llm_synthetic(&f, path, LLM_TYPE_Q8_0, 5);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return f;
}

static struct llm_model *open_model_of(struct llm_file *f)
{
    llm_status s;
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = 2;
    s = llm_model_from_file(&m, f, &mp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return m;
}

static struct llm_model *open_model(int which)
{
    return open_model_of(open_file(which));
}

/* n_batch 8: window layers bounded; 512: stored in full */
static struct llm_context *open_ctx(struct llm_model *m, int32_t n_seq, int32_t n_batch)
{
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = CTX;
    cp.n_seq = n_seq;
    cp.n_batch = n_batch;
    cp.kv_type_k = cp.kv_type_v = LLM_TYPE_F16;
    llm_status s = llm_context_new(&c, m, &cp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return c;
}

static void tokens(int32_t *tok, int32_t n, int32_t V, int salt)
{
    for (int32_t j = 0; j < n; j++)
        tok[j] = (int32_t)((j * 29 + salt * 11 + (j * j) % 13 + 1) % V);
}

/* Every position's logits of tok (N) in one call in a context stored in
 * full: the reference (its KV bytes in *bytes when not NULL). */
static float *reference_bytes(struct llm_model *m, const int32_t *tok, uint64_t *bytes)
{
    const int32_t V = llm_model_config(m)->n_vocab;
    struct llm_context *c = open_ctx(m, 1, 512);
    struct llm_kv_stats st;
    llm_context_kv_stats(c, &st, NULL);
    cr_assert_eq(st.slots, 0, "n_batch 512: no window slots expected");
    float *ref = malloc(sizeof(float) * (size_t)N * (size_t)V);
    cr_assert_eq(llm_decode(c, 0, tok, N, 0, ref, 1), LLM_OK);
    if (bytes)
        *bytes = llm_context_kv_bytes(c);
    llm_context_free(c);
    return ref;
}


/* A model, its long sequence and the reference logits of it. */
struct fix {
    struct llm_model *m;
    int32_t V;
    int32_t tok[N];
    float *ref;
    uint64_t full_bytes; /* the reference context's KV bytes */
};

static void begin(struct fix *x, int which, int salt)
{
    x->m = open_model(which);
    x->V = llm_model_config(x->m)->n_vocab;
    tokens(x->tok, N, x->V, salt);
    x->ref = reference_bytes(x->m, x->tok, &x->full_bytes);
}

static void end(struct fix *x)
{
    free(x->ref);
    llm_model_close(x->m);
}

/* Run x's tokens [from, to) in steps of STEP into seq of c, comparing each
 * position's logits with the reference. */
static void run_steps(struct llm_context *c, int32_t seq, const struct fix *x, int32_t from,
                      int32_t to, const char *what)
{
    const int32_t V = x->V;
    float *lg = malloc(sizeof(float) * STEP * (size_t)V);
    for (int32_t p = from; p < to; p += STEP) {
        const int32_t k = to - p < STEP ? to - p : STEP;
        llm_status s = llm_decode(c, seq, x->tok + p, k, p, lg, 1);
        cr_assert_eq(s, LLM_OK, "%s: %s", what, llm_error_detail(s));
        cr_assert_eq(memcmp(lg, x->ref + (size_t)p * V, sizeof(float) * (size_t)(k * V)), 0,
                     "%s: positions %d..%d differ from the reference", what, p, p + k - 1);
    }
    free(lg);
}

/* The long sequence in steps: the same bits as the reference, and the
 * window slots bounded (a sequence holds at most win_blocks, fewer than its
 * blocks), all back in the pool after a reset; the same in one call of all
 * its tokens. */
static void check_bounded(int which)
{
    struct fix x;
    begin(&x, which, which);
    struct llm_context *c = open_ctx(x.m, 1, STEP);
    run_steps(c, 0, &x, 0, N, shapes[which]);
    struct llm_kv_stats st;
    llm_context_kv_stats(c, &st, NULL);
    const struct llm_kv *kv = llm_context_kv(c);
    cr_assert_gt(st.slots, 0, "no window slots");
    cr_assert_eq(st.slots, kv->win_blocks);
    cr_assert_eq(st.used, (N + 15) / 16, "every block kept for the full layers and sharing");
    cr_assert_leq(st.slots_peak, kv->win_blocks);
    cr_assert_lt(st.slots_used, st.used / 2, "%d window slots for %d blocks", st.slots_used,
                 st.used);
    cr_assert_gt(llm_kv_window_from(kv, 0), 0);
    /* the storage: blocks of the full layers, slots of the window layers,
     * less than every layer in full */
    cr_assert_eq(llm_context_kv_bytes(c), (uint64_t)st.n_blocks * llm_kv_block_bytes(&kv->p) +
                                              llm_kv_window_bytes(&kv->p));
    cr_assert_lt(llm_context_kv_bytes(c), x.full_bytes);
    llm_context_reset(c, 0);
    llm_context_kv_stats(c, &st, NULL);
    cr_assert_eq(st.used, 0);
    cr_assert_eq(st.slots_used, 0, "%d window slots still held", st.slots_used);
    /* all of it in one call: the batch's blocks are taken slice by slice */
    float *lg = malloc(sizeof(float) * (size_t)N * (size_t)x.V);
    cr_assert_eq(llm_decode(c, 0, x.tok, N, 0, lg, 1), LLM_OK, "%s", llm_error_detail(-1));
    cr_assert_eq(memcmp(lg, x.ref, sizeof(float) * (size_t)N * (size_t)x.V), 0);
    free(lg);
    llm_context_free(c);
    end(&x);
}

Test(window, mistral_window_rows_bounded_same_bits) { check_bounded(0); }
Test(window, gemma2_window_rows_bounded_same_bits) { check_bounded(1); }
Test(window, gemma3_window_rows_bounded_same_bits) { check_bounded(2); }

/* Cuts back: within the kept positions (speculation's rollback) the same
 * length is kept and the tokens again give the same bits; far back, fewer
 * positions are kept (the window rows there are gone), and computing the
 * rest again gives the same bits. */
Test(window, cut_back_keeps_or_says_how_much)
{
    struct fix x;
    begin(&x, 1, 1);
    struct llm_context *c = open_ctx(x.m, 1, STEP);
    run_steps(c, 0, &x, 0, 300, "to 300");
    cr_assert(llm_kv_can_cut(llm_context_kv(c), 0, 300 - 65));
    cr_assert_eq(llm_context_truncate(c, 0, 300 - 65), 300 - 65, "a rollback of 65");
    run_steps(c, 0, &x, 300 - 65, 300, "after a rollback of 65");
    cr_assert(!llm_kv_can_cut(llm_context_kv(c), 0, 100));
    const int32_t kept = llm_context_truncate(c, 0, 100);
    cr_assert_lt(kept, 100, "a cut to 100 kept %d", kept);
    cr_assert_eq(kept % 16, 0);
    run_steps(c, 0, &x, kept, N, "after a cut far back");
    /* a step that starts far back is refused, nothing changed */
    float *lg = malloc(sizeof(float) * (size_t)x.V);
    cr_assert_eq(llm_decode(c, 0, x.tok + 50, 1, 50, lg, 0), LLM_E_INVALID);
    cr_assert_eq(llm_context_seq_len(c, 0), N);
    free(lg);
    llm_context_free(c);
    end(&x);
}

/* A fork at the end shares the blocks and goes on as the original would;
 * a fork of an early prefix, whose window rows are gone, is refused. */
Test(window, fork_at_the_end_refused_far_back)
{
    struct fix x;
    begin(&x, 2, 2);
    struct llm_context *c = open_ctx(x.m, 2, STEP);
    run_steps(c, 0, &x, 0, 300, "to 300");
    cr_assert_eq(llm_context_fork(c, 0, 1, 300), LLM_OK);
    run_steps(c, 1, &x, 300, N, "the fork");
    run_steps(c, 0, &x, 300, N, "the original after the fork");
    cr_assert_eq(llm_context_fork(c, 0, 1, 100), LLM_E_INVALID);
    cr_assert_eq(llm_context_seq_len(c, 1), N, "a refused fork changes nothing");
    llm_context_reset(c, 0);
    llm_context_reset(c, 1);
    struct llm_kv_stats st;
    llm_context_kv_stats(c, &st, NULL);
    cr_assert_eq(st.used + st.slots_used, 0);
    llm_context_free(c);
    end(&x);
}

/* A state file of the long sequence: loaded into another bounded context
 * it goes on with the same bits; a context that stores every layer in
 * full, or a short prefix of it, would read window rows the file has not:
 * nothing is loaded. */
Test(window, state_moves_between_processes)
{
    struct fix x;
    begin(&x, 1, 3);
    struct llm_context *c = open_ctx(x.m, 1, STEP);
    run_steps(c, 0, &x, 0, 300, "to 300");
    char path[512];
    snprintf(path, sizeof path, "%s/window.state", llm_test_tmpdir());
    struct llm_sampler_params sp;
    llm_sampler_params_default(&sp);
    cr_assert_eq(llm_kvstate_save(c, 0, x.tok, 300, x.ref + (size_t)299 * x.V, &sp, 1, path), LLM_OK);
    const int32_t from = llm_kv_window_from(llm_context_kv(c), 0);
    cr_assert_gt(from, 0);
    llm_context_free(c);
    struct {
        int32_t n_batch, n, want;
    } cases[] = { { STEP, 300, 300 }, { STEP, 299, 299 }, { 512, 300, 0 }, { STEP, 120, 0 } };
    for (int i = 0; i < 4; i++) {
        struct llm_state_reader *r;
        struct llm_state_info in;
        cr_assert_eq(llm_state_open(&r, path, &in), LLM_OK);
        cr_assert_eq(in.window_from, from);
        int32_t *t = malloc(sizeof(int32_t) * (size_t)in.n_tokens);
        float *lg = malloc(sizeof(float) * (size_t)x.V);
        cr_assert_eq(llm_state_read_tokens(r, t, lg), LLM_OK);
        c = open_ctx(x.m, 1, cases[i].n_batch);
        cr_assert_eq(llm_kvstate_load(r, &in, c, 0, cases[i].n), LLM_OK);
        llm_state_close(r);
        cr_assert_eq(llm_context_seq_len(c, 0), cases[i].want, "case %d: %d positions", i,
                     llm_context_seq_len(c, 0));
        const int32_t got = llm_context_seq_len(c, 0);
        if (cases[i].n_batch == STEP)
            run_steps(c, 0, &x, got, N, "after loading");
        llm_context_free(c);
        free(t);
        free(lg);
    }
    end(&x);
}

/* The prefix cache gives a new sequence only blocks whose window rows of
 * its last positions are held: while the first sequence holds them, all of
 * its prompt; once it has moved on, none of it; each time the same bits. */
Test(window, prefix_cache_only_with_the_window_rows)
{
    struct fix x;
    begin(&x, 0, 4);
    struct llm_context *c = open_ctx(x.m, 3, STEP);
    struct llm_prefix *pc;
    cr_assert_eq(llm_prefix_new(&pc, llm_context_kv(c)), LLM_OK);
    run_steps(c, 0, &x, 0, 160, "a prompt of 160");
    cr_assert_eq(llm_prefix_insert(pc, 0, x.tok, 160), LLM_OK);
    const int32_t hit = llm_prefix_attach(pc, 1, x.tok, 160, 1000);
    cr_assert_eq(hit, 160, "while the prompt's window rows are held: %d", hit);
    run_steps(c, 1, &x, hit, N, "after a hit");
    run_steps(c, 0, &x, 160, N, "the first, moved on");
    llm_context_reset(c, 1);
    const int32_t late = llm_prefix_attach(pc, 2, x.tok, 160, 1000);
    cr_assert_lt(late, 160, "the window rows of the prompt's end are gone: %d", late);
    run_steps(c, 2, &x, late, 200, "after a late lookup");
    llm_prefix_free(pc);
    llm_context_free(c);
    end(&x);
}

/* llm-kvstat's arithmetic (kv/kvstat.h) is what the cache allocates: the
 * shape read from each model's metadata, f16, 4096 tokens, one sequence,
 * steps of 512 (llm-run's default) and of 64. */
Test(window, kvstat_counts_what_the_cache_holds)
{
    for (int which = 0; which < 3; which++) {
        struct llm_file *f = open_file(which);
        struct llm_kvstat_shape sh;
        cr_assert_eq(llm_kvstat_shape_from_meta(&sh, f->meta, "w"), LLM_OK);
        struct llm_model *m = open_model_of(f);
        cr_assert_eq(sh.n_local, which == 0 ? 2 : which == 1 ? 2 : 5, "%s", shapes[which]);
        for (int32_t step = 512; step >= 64; step /= 8) {
            struct llm_context *c;
            struct llm_context_params cp;
            llm_context_params_default(&cp);
            cp.n_ctx = 4096;
            cp.n_batch = step;
            cp.kv_type_k = cp.kv_type_v = LLM_TYPE_F16;
            cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
            struct llm_kvstat_params p;
            struct llm_kvstat_report r;
            llm_kvstat_params_default(&p);
            p.ctx = 4096;
            p.step = step;
            cr_assert_eq(llm_kvstat_compute(&r, &sh, &p, NULL, 0), LLM_OK);
            cr_assert(r.have_window);
            cr_assert_eq(r.bytes_per_sequence_windowed, llm_context_kv_bytes(c),
                         "%s, steps of %d: kvstat %llu, the cache %llu", shapes[which], step,
                         (unsigned long long)r.bytes_per_sequence_windowed,
                         (unsigned long long)llm_context_kv_bytes(c));
            llm_context_free(c);
        }
        llm_model_close(m);
    }
}

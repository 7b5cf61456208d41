/* Tests of the batched forward pass: a sequence's logits are the same bits
 * alone or batched (any batch size, slot and thread count), however its
 * prompt is split into chunks, and after a fork; the KV pool's blocks are
 * shared by forks, copied before a write into a shared one, all free again
 * after every test, and running out of them is LLM_E_KV_FULL with nothing
 * changed. On stories260K (f32, and converted to q8_0, q4_1 and q3z_g32:
 * rows that are not interleaved), a synthetic model whose shapes take the
 * interleaved layout (q4_0, q8_0, f16), and SmolLM2 when models/ has it. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "../../../lib/llm.h"
#include "../helpers.h"

#define NP 16    /* prompts */
#define STEPS 6  /* greedy tokens after each prompt */

static const char *SMOL = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/* A model to test on: 0-3 stories260K as f32, q8_0, q4_1, q3z_g32; 4-6 a
 * synthetic llama whose matrices take the interleaved layout, as q4_0,
 * q8_0, f16; 7 SmolLM2 (NULL when it is absent or the data is); 8 a
 * synthetic mistral with a sliding window of 7 (shorter than most prompts,
 * not a multiple of the block size), q8_0; 9 a synthetic qwen3 (per-head
 * q/k norms, head size not hidden / heads), f32; 10 a synthetic qwen2moe
 * (6 experts, 2 a token, a shared expert), q8_0: tokens grouped by expert
 * differently in every batch. */
static struct llm_model *open_model(int which, int n_threads)
{
    static const enum llm_type st[] = { LLM_TYPE_F32, LLM_TYPE_Q8_0, LLM_TYPE_Q4_1,
                                        LLM_TYPE_Q3Z_G32 };
    static const enum llm_type sy[] = { LLM_TYPE_Q4_0, LLM_TYPE_Q8_0, LLM_TYPE_F16 };
    struct llm_file *f = NULL;
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    llm_status s;
    if (which < 4) {
        const char *p = llm_test_data("gguf/stories260K.gguf");
        if (!p)
            return NULL;
        cr_assert_eq(llm_import(&f, p, &io), LLM_OK);
        if (st[which] != LLM_TYPE_F32)
            cr_assert_eq(llm_file_convert(f, st[which]), LLM_OK);
    } else if (which < 7 || which > 7) {
        const char *dir = llm_test_tmpdir();
        char path[512];
        snprintf(path, sizeof path, "%s/shape.yaml", dir);
        FILE *fp = fopen(path, "w");
        cr_assert(fp);
        fputs(which == 8    ? "architecture: mistral\nsliding_window: 7\n"
              : which == 9  ? "architecture: qwen3\nhead_dim: 48\n"
              : which == 10 ? "architecture: qwen2moe\nexpert_count: 6\nexpert_used_count: 2\n"
                              "expert_feed_forward_length: 64\n"
                              "expert_shared_feed_forward_length: 96\n"
                            : "architecture: llama\n",
              fp);
        fputs("embedding_length: 128\nfeed_forward_length: 256\n"
              "block_count: 2\nhead_count: 4\nhead_count_kv: 2\nvocab_size: 160\n"
              "context_length: 256\nrope_theta: 10000.0\nrms_norm_eps: 1e-5\n"
              "tie_embeddings: true\n",
              fp);
        fclose(fp);
        s = llm_synthetic(&f, path,
                          which < 7 ? sy[which - 4] : which == 9 ? LLM_TYPE_F32 : LLM_TYPE_Q8_0, 3);
        cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    } else {
        if (access(SMOL, R_OK))
            return NULL;
        cr_assert_eq(llm_import(&f, SMOL, &io), LLM_OK);
    }
    struct llm_model *m;
    struct llm_model_params mp;
    llm_model_params_default(&mp);
    mp.n_threads = n_threads;
    s = llm_model_from_file(&m, f, &mp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return m;
}

static struct llm_context *open_ctx(struct llm_model *m, int32_t n_seq, int32_t n_ctx,
                                    int32_t kv_blocks, int n_threads)
{
    struct llm_context *c;
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.kv_type_k = cp.kv_type_v = LLM_TYPE_F16;
    cp.kv_blocks = kv_blocks;
    cp.n_threads = n_threads;
    llm_status s = llm_context_new(&c, m, &cp);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return c;
}

static void assert_all_free(const struct llm_context *c)
{
    struct llm_kv_stats st;
    llm_context_kv_stats(c, &st, NULL);
    cr_assert_eq(st.used, 0, "%d KV blocks still in use", st.used);
    cr_assert_eq(st.free_, st.n_blocks);
}

/* Prompt i: 3 + 5 i tokens, different for every i. */
static int32_t prompt(int i, int32_t n_vocab, int32_t *tok)
{
    int32_t n = 3 + 5 * i;
    for (int32_t j = 0; j < n; j++)
        tok[j] = (int32_t)((j * 31 + i * 17 + (j * j) % 7 + 1) % n_vocab);
    return n;
}

static int32_t argmax(const float *l, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

/* Each prompt alone in a fresh context on `threads` threads: its last
 * logits, then STEPS greedy steps' logits: out (NP, STEPS + 1, n_vocab). */
static void run_alone(struct llm_model *m, int threads, float *out)
{
    const int32_t V = llm_model_config(m)->n_vocab;
    struct llm_context *c = open_ctx(m, 1, 128, 0, threads);
    int32_t tok[128];
    for (int i = 0; i < NP; i++) {
        int32_t n = prompt(i, V, tok);
        float *o = out + (size_t)i * (STEPS + 1) * V;
        llm_context_reset(c, 0);
        cr_assert_eq(llm_decode(c, 0, tok, n, 0, o, 0), LLM_OK);
        for (int s = 0; s < STEPS; s++) {
            int32_t t = argmax(o + (size_t)s * V, V);
            cr_assert_eq(llm_decode(c, 0, &t, 1, n + s, o + (size_t)(s + 1) * V, 0), LLM_OK);
        }
    }
    llm_context_reset(c, 0);
    assert_all_free(c);
    llm_context_free(c);
}

/* The prompts `which` (nw of them, in that order: their slots) in one
 * batch, then STEPS batched greedy steps; each sequence's logits against
 * its alone run, bit for bit. */
static void run_batched(struct llm_model *m, struct llm_context *c, const int *which, int nw,
                        const float *alone, const char *what)
{
    const int32_t V = llm_model_config(m)->n_vocab;
    int32_t tok[NP * 128], pos[NP * 128], seq[NP * 128], len[NP];
    int32_t n = 0;
    for (int k = 0; k < nw; k++) {
        int32_t pl = prompt(which[k], V, tok + n);
        for (int32_t j = 0; j < pl; j++)
            pos[n + j] = j, seq[n + j] = k;
        len[k] = pl;
        n += pl;
    }
    float *lg = malloc(sizeof(float) * (size_t)nw * (size_t)V);
    struct llm_batch b = { .n = n, .token = tok, .pos = pos, .seq = seq };
    cr_assert_eq(llm_decode_batch(c, &b, lg), LLM_OK, "%s", llm_error_detail(-1));
    for (int s = 0; s <= STEPS; s++) {
        for (int k = 0; k < nw; k++) {
            const float *e = alone + ((size_t)which[k] * (STEPS + 1) + (size_t)s) * V;
            if (memcmp(lg + (size_t)k * V, e, sizeof(float) * (size_t)V)) {
                int32_t at = 0;
                while (lg[(size_t)k * V + at] == e[at])
                    at++;
                cr_assert_fail("%s: prompt %d in slot %d of %d, step %d: logit %d is %.9g "
                               "batched, %.9g alone", what, which[k], k, nw, s, at,
                               lg[(size_t)k * V + at], e[at]);
            }
        }
        if (s == STEPS)
            break;
        for (int k = 0; k < nw; k++) {
            tok[k] = argmax(lg + (size_t)k * V, V);
            pos[k] = len[k] + s;
            seq[k] = k;
        }
        b.n = nw;
        cr_assert_eq(llm_decode_batch(c, &b, lg), LLM_OK, "%s", llm_error_detail(-1));
    }
    for (int k = 0; k < nw; k++)
        llm_context_reset(c, k);
    assert_all_free(c);
    free(lg);
}

static void check_alone_equals_batched(int which_model)
{
    struct llm_model *m = open_model(which_model, 1);
    if (!m) {
        cr_skip_test("model %d is absent", which_model);
        return;
    }
    const int32_t V = llm_model_config(m)->n_vocab;
    float *alone = malloc(sizeof(float) * NP * (STEPS + 1) * (size_t)V);
    run_alone(m, 1, alone);
    int order[NP], rev[NP];
    for (int i = 0; i < NP; i++)
        order[i] = i, rev[i] = NP - 1 - i;
    /* all 16, in order and reversed, on 2 threads; then smaller batches in
     * other slots, in a pool with more slots than sequences; the batch in
     * slices of 7 tokens */
    struct llm_context *c = open_ctx(m, NP, 128, 0, 2);
    run_batched(m, c, order, NP, alone, "16 in order");
    run_batched(m, c, rev, NP, alone, "16 reversed");
    const int sets[][4] = { { 5, -1 }, { 9, 2, -1 }, { 15, 0, 7, -1 }, { 3, 12, 1, 8 } };
    for (int i = 0; i < 4; i++) {
        int nw = 0;
        while (nw < 4 && sets[i][nw] >= 0)
            nw++;
        run_batched(m, c, sets[i], nw, alone, "a few");
    }
    llm_context_free(c);
    struct llm_context_params cp;
    llm_context_params_default(&cp);
    cp.n_ctx = 128, cp.n_seq = NP, cp.kv_type_k = cp.kv_type_v = LLM_TYPE_F16, cp.n_batch = 7;
    cr_assert_eq(llm_context_new(&c, m, &cp), LLM_OK);
    run_batched(m, c, order, NP, alone, "in slices of 7");
    llm_context_free(c);
    free(alone);
    llm_model_close(m);
}

Test(batch, alone_equals_batched_stories260k_f32) { check_alone_equals_batched(0); }
Test(batch, alone_equals_batched_stories260k_q8_0) { check_alone_equals_batched(1); }
Test(batch, alone_equals_batched_stories260k_q4_1) { check_alone_equals_batched(2); }
Test(batch, alone_equals_batched_stories260k_q3z) { check_alone_equals_batched(3); }
Test(batch, alone_equals_batched_interleaved_q4_0) { check_alone_equals_batched(4); }
Test(batch, alone_equals_batched_interleaved_q8_0) { check_alone_equals_batched(5); }
Test(batch, alone_equals_batched_f16) { check_alone_equals_batched(6); }
Test(batch, alone_equals_batched_smollm2) { check_alone_equals_batched(7); }
Test(batch, alone_equals_batched_sliding_window) { check_alone_equals_batched(8); }
Test(batch, alone_equals_batched_qwen3_qk_norm) { check_alone_equals_batched(9); }
Test(batch, alone_equals_batched_mixture_of_experts) { check_alone_equals_batched(10); }

/* A prompt of 100 tokens in chunks of 1, 7, 64 and all at once: every
 * position's logits are the same bits. */
static void check_chunks(int which_model)
{
    struct llm_model *m = open_model(which_model, 2);
    if (!m) {
        cr_skip_test("model %d is absent", which_model);
        return;
    }
    const int32_t V = llm_model_config(m)->n_vocab, n = 100;
    int32_t tok[100];
    for (int32_t j = 0; j < n; j++)
        tok[j] = (int32_t)((j * 13 + 5) % V);
    struct llm_context *c = open_ctx(m, 1, 128, 0, 2);
    float *ref = malloc(sizeof(float) * (size_t)(n * V)), *lg = malloc(sizeof(float) * (size_t)(n * V));
    cr_assert_eq(llm_decode(c, 0, tok, n, 0, ref, 1), LLM_OK);
    const int32_t chunks[] = { 1, 7, 64, 512 };
    for (int ci = 0; ci < 4; ci++) {
        llm_context_reset(c, 0);
        for (int32_t p = 0; p < n; p += chunks[ci]) {
            int32_t k = n - p < chunks[ci] ? n - p : chunks[ci];
            cr_assert_eq(llm_decode(c, 0, tok + p, k, p, lg + (size_t)p * V, 1), LLM_OK);
        }
        cr_assert_eq(memcmp(lg, ref, sizeof(float) * (size_t)(n * V)), 0,
                     "model %d: chunks of %d differ from one call", which_model, chunks[ci]);
    }
    llm_context_reset(c, 0);
    assert_all_free(c);
    llm_context_free(c);
    free(ref);
    free(lg);
    llm_model_close(m);
}

Test(batch, chunked_prefill_stories260k_q8_0) { check_chunks(1); }
Test(batch, chunked_prefill_stories260k_q3z) { check_chunks(3); }
Test(batch, chunked_prefill_interleaved_q4_0) { check_chunks(4); }
Test(batch, chunked_prefill_f16) { check_chunks(6); }
Test(batch, chunked_prefill_smollm2) { check_chunks(7); }
Test(batch, chunked_prefill_sliding_window) { check_chunks(8); }

/* A prompt of 21 tokens (a partial last block of 16), forked into 4
 * sequences: its blocks are shared, not copied; the forks then take
 * different tokens, the shared partial block is copied for each writer,
 * and each fork's logits are those of the same tokens run alone. */
Test(batch, fork_shares_blocks_and_diverges_correctly)
{
    struct llm_model *m = open_model(4, 2);
    const int32_t V = llm_model_config(m)->n_vocab, n = 21;
    int32_t tok[32];
    for (int32_t j = 0; j < n; j++)
        tok[j] = (j * 7 + 3) % V;
    struct llm_context *c = open_ctx(m, 4, 64, 0, 2);
    float *lg = malloc(sizeof(float) * 4 * (size_t)V), *ref = malloc(sizeof(float) * (size_t)V);
    cr_assert_eq(llm_decode(c, 0, tok, n, 0, lg, 0), LLM_OK);
    for (int k = 1; k < 4; k++)
        cr_assert_eq(llm_context_fork(c, 0, k, n), LLM_OK);
    struct llm_kv_stats st;
    llm_context_kv_stats(c, &st, NULL);
    cr_assert_eq(st.used, 2, "21 tokens in blocks of 16, shared by 4");
    cr_assert_eq(st.shared, 2);
    cr_assert_eq(st.logical, 8);
    /* each fork takes a different next token, in one batch */
    int32_t bt[4], bp[4], bs[4];
    for (int k = 0; k < 4; k++)
        bt[k] = (k * 11 + 1) % V, bp[k] = n, bs[k] = k;
    struct llm_batch b = { .n = 4, .token = bt, .pos = bp, .seq = bs };
    cr_assert_eq(llm_decode_batch(c, &b, lg), LLM_OK);
    llm_context_kv_stats(c, &st, NULL);
    cr_assert_eq(st.used, 1 + 4, "the shared partial block copied for three writers, "
                 "the last holder writes in place");
    cr_assert_eq(st.shared, 1);
    /* against each continuation alone */
    struct llm_context *a = open_ctx(m, 1, 64, 0, 1);
    for (int k = 0; k < 4; k++) {
        tok[n] = bt[k];
        llm_context_reset(a, 0);
        cr_assert_eq(llm_decode(a, 0, tok, n + 1, 0, ref, 0), LLM_OK);
        cr_assert_eq(memcmp(ref, lg + (size_t)k * V, sizeof(float) * (size_t)V), 0,
                     "fork %d differs from its tokens alone", k);
    }
    /* the original prefix is intact: a fresh fork of sequence 0's first 21
     * positions continues as the prompt alone does */
    llm_context_truncate(c, 0, n);
    cr_assert_eq(llm_context_fork(c, 0, 3, n), LLM_OK);
    int32_t t = 9 % V;
    cr_assert_eq(llm_decode(c, 3, &t, 1, n, lg, 0), LLM_OK);
    tok[n] = t;
    llm_context_reset(a, 0);
    cr_assert_eq(llm_decode(a, 0, tok, n + 1, 0, ref, 0), LLM_OK);
    cr_assert_eq(memcmp(ref, lg, sizeof(float) * (size_t)V), 0);
    for (int k = 0; k < 4; k++)
        llm_context_reset(c, k);
    assert_all_free(c);
    llm_context_reset(a, 0);
    assert_all_free(a);
    llm_context_free(a);
    llm_context_free(c);
    free(lg);
    free(ref);
    llm_model_close(m);
}

/* A pool of 5 blocks of 16 tokens for 3 sequences: a batch that does not
 * fit is LLM_E_KV_FULL and changes nothing; after a sequence is cut, the
 * same batch runs and gives the logits it gives in a pool that fits. */
Test(batch, out_of_blocks_is_a_status_and_changes_nothing)
{
    struct llm_model *m = open_model(4, 1);
    const int32_t V = llm_model_config(m)->n_vocab;
    struct llm_context *c = open_ctx(m, 3, 64, 5, 1);
    int32_t tok[64], pos[64], seq[64];
    for (int i = 0; i < 64; i++)
        tok[i] = (i * 5 + 2) % V;
    float *lg = malloc(sizeof(float) * 3 * (size_t)V), *ref = malloc(sizeof(float) * (size_t)V);
    cr_assert_eq(llm_decode(c, 0, tok, 40, 0, NULL, 0), LLM_OK); /* 3 blocks */
    cr_assert_eq(llm_decode(c, 1, tok, 20, 0, NULL, 0), LLM_OK); /* 2 blocks: the pool is full */
    /* sequence 1 grows into a third block and 2 starts: 2 blocks, none free */
    for (int i = 0; i < 3; i++)
        pos[i] = 20 + i, seq[i] = 1;
    pos[3] = 0, seq[3] = 2;
    struct llm_batch b = { .n = 4, .token = tok + 20, .pos = pos, .seq = seq };
    llm_status s = llm_decode_batch(c, &b, lg);
    cr_assert_eq(s, LLM_E_KV_FULL, "%s", llm_error_detail(s));
    cr_assert_eq(llm_context_seq_len(c, 0), 40);
    cr_assert_eq(llm_context_seq_len(c, 1), 20);
    cr_assert_eq(llm_context_seq_len(c, 2), 0);
    struct llm_kv_stats st;
    llm_context_kv_stats(c, &st, NULL);
    cr_assert_eq(st.used, 5);
    /* preempt: sequence 0 is cut back to 16 tokens (two blocks free) */
    llm_context_truncate(c, 0, 16);
    cr_assert_eq(llm_decode_batch(c, &b, lg), LLM_OK);
    struct llm_context *a = open_ctx(m, 1, 64, 0, 1);
    int32_t t1[23];
    memcpy(t1, tok, 20 * sizeof(int32_t));
    memcpy(t1 + 20, tok + 20, 3 * sizeof(int32_t));
    cr_assert_eq(llm_decode(a, 0, t1, 23, 0, ref, 0), LLM_OK);
    cr_assert_eq(memcmp(ref, lg, sizeof(float) * (size_t)V), 0);
    llm_context_reset(a, 0);
    cr_assert_eq(llm_decode(a, 0, tok + 23, 1, 0, ref, 0), LLM_OK);
    cr_assert_eq(memcmp(ref, lg + V, sizeof(float) * (size_t)V), 0);
    llm_context_reset(a, 0);
    llm_context_free(a);
    for (int k = 0; k < 3; k++)
        llm_context_reset(c, k);
    assert_all_free(c);
    llm_context_free(c);
    free(lg);
    free(ref);
    llm_model_close(m);
}

/* Batches the forward pass cannot take are refused, nothing run. */
Test(batch, malformed_batches_are_refused)
{
    struct llm_model *m = open_model(4, 1);
    struct llm_context *c = open_ctx(m, 2, 16, 0, 1);
    int32_t tok[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    struct {
        int32_t n, pos[4], seq[4];
        const char *what;
    } bad[] = {
        { 3, { 0, 1, 0 }, { 0, 0, 1 }, NULL },         /* fine: 2 runs */
        { 3, { 0, 0, 1 }, { 0, 1, 0 }, "not one run" }, /* sequence 0 twice */
        { 2, { 0, 2 }, { 0, 0 }, "follow one another" },
        { 1, { 5 }, { 1 }, "starts at position" },
        { 1, { 0 }, { 2 }, "out of range" },
        { 1, { 0 }, { -1 }, "out of range" },
        { 0, { 0 }, { 0 }, "empty batch" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct llm_batch b = { .n = bad[i].n, .token = tok, .pos = bad[i].pos, .seq = bad[i].seq };
        llm_status s = llm_decode_batch(c, &b, NULL);
        if (!bad[i].what) {
            cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
            continue;
        }
        cr_assert_eq(s, LLM_E_INVALID, "case %zu", i);
        cr_assert(strstr(llm_error_detail(s), bad[i].what), "case %zu: %s", i,
                  llm_error_detail(s));
    }
    /* past the context, and a token outside the vocabulary */
    int32_t pos[17], seq[17] = { 0 }, big[17];
    for (int i = 0; i < 17; i++)
        pos[i] = i, big[i] = 1;
    llm_context_reset(c, 0);
    struct llm_batch b = { .n = 17, .token = big, .pos = pos, .seq = seq };
    cr_assert_eq(llm_decode_batch(c, &b, NULL), LLM_E_INVALID);
    cr_assert(strstr(llm_error_detail(-1), "context full"));
    big[0] = 100000;
    b.n = 1;
    cr_assert_eq(llm_decode_batch(c, &b, NULL), LLM_E_INVALID);
    cr_assert_eq(llm_context_seq_len(c, 0), 0);
    for (int k = 0; k < 2; k++)
        llm_context_reset(c, k);
    assert_all_free(c);
    llm_context_free(c);
    llm_model_close(m);
}

/* The same with the AVX2 kernels (the int16 GEMM and decode of AVX2, the
 * interleaved decode in two halves) where the CPU has AVX-512. */
#include "../../../lib/ops/matmul_impl.h"

static void restore_isa(void)
{
    llm_matmul_set_isa(LLM_ISA_AVX512);
}

Test(batch, alone_equals_batched_avx2, .fini = restore_isa)
{
    if (llm_isa_detect() < LLM_ISA_AVX2) {
        cr_skip_test("no AVX2 on this CPU");
        return;
    }
    llm_matmul_set_isa(LLM_ISA_AVX2);
    check_alone_equals_batched(3);
    check_alone_equals_batched(5);
}

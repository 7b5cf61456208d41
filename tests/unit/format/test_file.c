/* test_file.c: the checks of a tensor's first use (lib/format/file.c): a
 * stored checksum that does not match stops every reader and every writer
 * (a copy must not launder damaged weights under a new checksum), NaN and
 * infinite weights are refused, counted or ignored as the file says, and
 * the opt-out (llm-run --no-verify) reads the bytes as they are. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/format/import.h"
#include "../helpers.h"

static float emb[64 * 40], norm[64];
static uint16_t wq[64 * 64];

/* A small model: a weight of every kind the checks treat differently. */
static struct llm_file *make_model(float poison)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "mem", "test"), LLM_OK);
    for (size_t i = 0; i < sizeof emb / sizeof emb[0]; i++)
        emb[i] = (float)i * 0.01f - 3.0f;
    for (size_t i = 0; i < sizeof wq / sizeof wq[0]; i++)
        wq[i] = (uint16_t)(0x3000 + i % 1000);
    for (size_t i = 0; i < 64; i++)
        norm[i] = 1.0f;
    norm[17] = poison;
    int64_t ne2[2] = { 64, 40 }, neq[2] = { 64, 64 }, ne1[1] = { 64 };
    cr_assert_eq(llm_file_add_tensor(f, "token_embd.weight", LLM_TYPE_F32, 2, ne2, emb, NULL), LLM_OK);
    cr_assert_eq(llm_file_add_tensor(f, "blk.0.attn_q.weight", LLM_TYPE_F16, 2, neq, wq, NULL), LLM_OK);
    cr_assert_eq(llm_file_add_tensor(f, "output_norm.weight", LLM_TYPE_F32, 1, ne1, norm, NULL), LLM_OK);
    /* tokenizer scores may be -inf: auxiliary data is not looked at */
    const char *toks[] = { "<unk>", "a" };
    uint32_t lens[] = { 5, 1 };
    float sc[] = { -INFINITY, -1 };
    cr_assert_eq(llm_file_set_vocab(f, 2, toks, lens, sc, NULL), LLM_OK);
    llm_meta_set_str(f->meta, "architecture", "llama");
    return f;
}

static char *write_model(struct llm_file *f, const char *name, int level)
{
    char *p = llm_malloc(512);
    snprintf(p, 512, "%s/%s", llm_test_tmpdir(), name);
    struct llm_write_opts o;
    llm_write_opts_default(&o);
    o.compress_level = level;
    llm_status s = llm_llm_write(f, p, &o);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return p;
}

/* Flip a byte in the middle of a tensor's stored bytes. */
static void damage(const char *path, const char *tensor)
{
    struct llm_file *f;
    cr_assert_eq(llm_llm_open(&f, path, NULL), LLM_OK);
    struct llm_tensor *t = llm_file_find(f, tensor);
    uint64_t off = t->offset + t->stored_size / 2;
    llm_file_free(f);
    FILE *fp = fopen(path, "r+b");
    cr_assert(fp);
    fseek(fp, (long)off, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, (long)off, SEEK_SET);
    fputc(c ^ 0x40, fp);
    fclose(fp);
}

static void is_corrupt(llm_status s, const char *path, const char *tensor)
{
    char want[1024];
    snprintf(want, sizeof want, "%s: tensor '%s': checksum mismatch", path, tensor);
    cr_assert_eq(s, LLM_E_CHECKSUM, "damaged tensor accepted (%d: %s)", s, llm_error_detail(s));
    cr_assert(strstr(llm_error_detail(s), want), "'%s' not in '%s'", want, llm_error_detail(s));
}

Test(file, damaged_tensor_stops_every_reader)
{
    for (int level = 0; level <= 3; level += 3) { /* stored plain and compressed */
        struct llm_file *f = make_model(1.0f), *g;
        char *p = write_model(f, "m.llm", level);
        damage(p, "blk.0.attn_q.weight");
        cr_assert_eq(llm_llm_open(&g, p, NULL), LLM_OK, "opening reads no tensor data");
        struct llm_tensor *t = llm_file_find(g, "blk.0.attn_q.weight");
        cr_assert_null(t->data, "a tensor's bytes are reachable before they are checked");
        const void *b;
        uint8_t buf[64 * 64 * 2];
        if (level == 0)
            is_corrupt(llm_tensor_peek(g, t, &b), p, t->name);
        else /* compressed: not in place, checked when read */
            cr_assert(llm_tensor_peek(g, t, &b) == LLM_OK && !b);
        is_corrupt(llm_tensor_read(g, t, buf), p, t->name);
        is_corrupt(llm_tensor_bytes(g, t, &b), p, t->name);
        /* the others are fine */
        cr_assert_eq(llm_tensor_bytes(g, llm_file_find(g, "token_embd.weight"), &b), LLM_OK);
        struct llm_vocab_view v;
        cr_assert_eq(llm_file_vocab(g, &v), LLM_OK);
        llm_file_free(g);
        llm_free(p);
        llm_file_free(f);
    }
}

/* The copies llm-convert makes: each must refuse, and leave no file. */
Test(file, damaged_tensor_is_not_copied)
{
    struct llm_file *f = make_model(1.0f), *g;
    char *p = write_model(f, "m.llm", 0);
    damage(p, "token_embd.weight");
    char out[600];
    snprintf(out, sizeof out, "%s.out", p);
    for (int k = 0; k < 5; k++) {
        cr_assert_eq(llm_llm_open(&g, p, NULL), LLM_OK);
        struct llm_write_opts wo;
        llm_write_opts_default(&wo);
        llm_status s;
        if (k == 0) {
            s = llm_llm_write(g, out, &wo);
        } else if (k == 1) {
            wo.compress_level = 3;
            s = llm_llm_write(g, out, &wo);
        } else if (k == 2) {
            wo.convert = 1, wo.type = LLM_TYPE_Q8_0;
            s = llm_llm_write(g, out, &wo);
        } else if (k == 3) {
            s = llm_gguf_write(g, out, &wo);
        } else {
            s = llm_llm_verify(g, NULL);
        }
        is_corrupt(s, p, "token_embd.weight");
        cr_assert_neq(access(out, F_OK), 0, "case %d: an output was left", k);
        llm_file_free(g);
    }
    /* the explicit opt-out reads the bytes as they are */
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    io.no_verify = 1;
    cr_assert_eq(llm_llm_open(&g, p, &io), LLM_OK);
    cr_assert_eq(llm_llm_write(g, out, NULL), LLM_OK);
    llm_file_free(g);
    llm_free(p);
    llm_file_free(f);
}

/* A checked copy keeps the checksums it checked: the bytes are the same. */
Test(file, checked_copy_is_identical)
{
    struct llm_file *f = make_model(1.0f), *g;
    char *p = write_model(f, "a.llm", 0);
    cr_assert_eq(llm_llm_open(&g, p, NULL), LLM_OK);
    char *q = write_model(g, "b.llm", 0);
    char *x, *y;
    size_t nx, ny;
    cr_assert_eq(llm_read_file(p, 1 << 24, &x, &nx), LLM_OK);
    cr_assert_eq(llm_read_file(q, 1 << 24, &y, &ny), LLM_OK);
    cr_assert_eq(nx, ny);
    cr_assert_eq(memcmp(x, y, nx), 0);
    llm_free(x);
    llm_free(y);
    llm_free(p);
    llm_free(q);
    llm_file_free(g);
    llm_file_free(f);
}

Test(file, nonfinite_weights_refused_counted_or_ignored)
{
    const float poison[] = { NAN, INFINITY, -INFINITY };
    for (int k = 0; k < 3; k++) {
        struct llm_file *f = make_model(poison[k]), *g;
        char *p = write_model(f, "nan.llm", 0);
        const void *b;
        /* the default: refused, naming the file, the tensor and the count */
        cr_assert_eq(llm_llm_open(&g, p, NULL), LLM_OK);
        llm_status s = llm_tensor_bytes(g, llm_file_find(g, "output_norm.weight"), &b);
        cr_assert_eq(s, LLM_E_FORMAT);
        char want[700];
        snprintf(want, sizeof want, "%s: tensor 'output_norm.weight': 1 NaN or infinite value "
                 "(the first at element 17)", p);
        cr_assert(strstr(llm_error_detail(s), want), "%s", llm_error_detail(s));
        /* the tokenizer's -inf score is not a weight */
        struct llm_vocab_view v;
        cr_assert_eq(llm_file_vocab(g, &v), LLM_OK);
        llm_file_free(g);
        /* counted (llm-convert), through a write */
        struct llm_import_opts io;
        llm_import_opts_default(&io);
        io.nonfinite = LLM_FINITE_COUNT;
        cr_assert_eq(llm_llm_open(&g, p, &io), LLM_OK);
        char *q = write_model(g, "copy.llm", 0);
        cr_assert_eq(g->n_nonfinite, 1);
        cr_assert_eq(g->n_nonfinite_tensors, 1);
        cr_assert_str_eq(g->nonfinite_first, "output_norm.weight");
        llm_file_free(g);
        llm_free(q);
        /* ignored (--info, --no-verify) */
        io.nonfinite = LLM_FINITE_IGNORE;
        cr_assert_eq(llm_llm_open(&g, p, &io), LLM_OK);
        cr_assert_eq(llm_tensor_bytes(g, llm_file_find(g, "output_norm.weight"), &b), LLM_OK);
        cr_assert_eq(g->n_nonfinite, 0);
        llm_file_free(g);
        llm_free(p);
        llm_file_free(f);
    }
}

/* A file made in memory (what a tool builds) checks nothing. */
Test(file, files_made_in_memory_check_nothing)
{
    struct llm_file *f = make_model(NAN);
    const void *b;
    cr_assert_eq(llm_tensor_bytes(f, llm_file_find(f, "output_norm.weight"), &b), LLM_OK);
    cr_assert_eq(f->n_nonfinite, 0);
    llm_file_free(f);
}

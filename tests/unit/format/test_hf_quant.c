/* test_hf_quant.c: Hugging Face GPTQ and AWQ checkpoints (hf_quant.c,
 * hf_quant_write.c).
 *
 * There is no GPTQ/AWQ checkpoint in the test data, so the fixtures are
 * written here byte by byte from the layouts of quantization.md 1.4 and 2.4:
 * a one-layer llama (hidden 64, 4 heads of 16, 1 KV head, intermediate 64)
 * whose seven linear layers have codes, fp16 scales and zeros given by
 * closed formulas. After import, every weight is dequantized with
 * llm_dequantize_row (quant.c, not the code under test) and compared
 * element by element with the spec's w = scale * (q - zero); the scales are
 * chosen with few significant bits so that the comparison is exact. Round
 * trips (ours -> GPTQ v1 / v2 / AWQ directory -> ours) must give every
 * tensor back byte for byte. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/fp16.h"
#include "../../../lib/format/file.h"
#include "../../../lib/format/hf_quant_impl.h"
#include "../../../lib/format/hf.h"
#include "../../../lib/format/hf_quant.h"
#include "../../../lib/format/import.h"
#include "../../../lib/format/meta.h"
#include "../../../lib/quant/quant.h"
#include "../../../lib/quant/grid.h"
#include "../helpers.h"

/* ---- a safetensors writer for fixtures ---------------------------------- */

struct st_t {
    char name[128];
    const char *dtype;
    int nd;
    int64_t shape[2];
    uint8_t *data;
    size_t n;
};

struct st {
    struct st_t t[64];
    int n;
};

static void st_add(struct st *s, const char *name, const char *dtype, int nd, int64_t d0,
                   int64_t d1, const void *data, size_t n)
{
    cr_assert_lt(s->n, 64);
    struct st_t *t = &s->t[s->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->nd = nd;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->data = malloc(n);
    memcpy(t->data, data, n);
    t->n = n;
}

/* Writes DIR/model.safetensors; drops `cut` bytes from the end. */
static void st_write(struct st *s, const char *dir, size_t cut)
{
    json_t *root = json_object();
    size_t off = 0;
    for (int i = 0; i < s->n; i++) {
        json_t *o = json_object(), *shape = json_array();
        for (int d = 0; d < s->t[i].nd; d++)
            json_array_append_new(shape, json_integer(s->t[i].shape[d]));
        json_object_set_new(o, "dtype", json_string(s->t[i].dtype));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "data_offsets",
                            json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + s->t[i].n)));
        json_object_set_new(root, s->t[i].name, o);
        off += s->t[i].n;
    }
    char *hdr = json_dumps(root, JSON_COMPACT);
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(hdr, 1, hl, fp);
    for (size_t i = hl; i < padded; i++)
        fputc(' ', fp);
    for (int i = 0; i < s->n; i++)
        fwrite(s->t[i].data, 1, s->t[i].n, fp);
    fclose(fp);
    if (cut) {
        struct stat stt;
        cr_assert_eq(stat(path, &stt), 0);
        cr_assert_eq(truncate(path, stt.st_size - (off_t)cut), 0);
    }
    free(hdr);
    json_decref(root);
    for (int i = 0; i < s->n; i++)
        free(s->t[i].data);
    s->n = 0;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    cr_assert(fp, "cannot write %s", path);
    fputs(text, fp);
    fclose(fp);
}

/* ---- the hand-built checkpoint ------------------------------------------ */

enum { H = 64, NH = 4, HD = 16, NKV = 1, FF = 64, V = 32 };

/* FF by default; set_ff changes the MLP width for one test. */
static struct {
    const char *hf, *gguf;
    int out, in;
} lins[7] = {
    { "self_attn.q_proj", "attn_q", NH * HD, H },   { "self_attn.k_proj", "attn_k", NKV * HD, H },
    { "self_attn.v_proj", "attn_v", NKV * HD, H },  { "self_attn.o_proj", "attn_output", H, NH * HD },
    { "mlp.gate_proj", "ffn_gate", FF, H },         { "mlp.up_proj", "ffn_up", FF, H },
    { "mlp.down_proj", "ffn_down", H, FF },
};
static int ff = FF;

static void set_ff(int n)
{
    ff = lins[4].out = lins[5].out = lins[6].in = n;
}

struct fix {
    int awq;       /* AWQ GEMM instead of GPTQ */
    int v2;        /* GPTQ: store z, not z - 1 */
    int sym;       /* every zero 8 */
    int act;       /* g_idx[c] = c % 2 instead of c / 32 */
    int group;     /* 32, or -1 */
    const char *fmt; /* checkpoint_format written, or NULL */
};

static int code_of(int l, int c, int o)
{
    return (c * 5 + o * 3 + l * 11 + (c * o) % 7) % 16;
}

static int zero_of(const struct fix *x, int l, int g, int o)
{
    return x->sym ? 8 : 1 + (g * 5 + o + l) % 15; /* 1..15: z - 1 fits v1 */
}

static float scale_of(int l, int g, int o)
{
    return (float)(1 + (o * 7 + g * 3 + l) % 13) / 256.0f; /* exact in fp16 */
}

static int group_of(const struct fix *x, int c, int in)
{
    if (x->group < 0)
        return 0;
    return x->act ? c % (in / x->group) : c / x->group;
}

/* The spec's w = scale * (q - zero), HF order: w[o][c]. */
static float spec_w(const struct fix *x, int l, int o, int c)
{
    int g = group_of(x, c, lins[l].in);
    return scale_of(l, g, o) * (float)(code_of(l, c, o) - zero_of(x, l, g, o));
}

static void add_lin(struct st *s, const struct fix *x, int l)
{
    const int in = lins[l].in, out = lins[l].out;
    const int G = x->group < 0 ? 1 : (in + x->group - 1) / x->group;
    /* GPTQ words per packed dimension: GPTQModel's ceil(n * 4 / 32) */
    const int in8 = (in + 7) / 8, out8 = (out + 7) / 8;
    static const int order[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };
    uint32_t *qw = calloc((size_t)in8 * out, 4), *qz = calloc((size_t)G * out8, 4);
    uint16_t *sc = calloc((size_t)G * out, 2);
    int32_t *gi = calloc((size_t)in, 4);
    for (int c = 0; c < in; c++)
        for (int o = 0; o < out; o++) {
            uint32_t q = (uint32_t)code_of(l, c, o);
            if (x->awq) /* [in][out/8], nibble i = column 8j + order[i] */
                for (int i = 0; i < 8; i++) {
                    if (order[i] == o % 8)
                        qw[c * (out / 8) + o / 8] |= q << (4 * i);
                }
            else /* [in/8][out], rows 8r..8r+7 LSB first */
                qw[(c / 8) * out + o] |= q << (4 * (c % 8));
        }
    for (int g = 0; g < G; g++)
        for (int o = 0; o < out; o++) {
            uint32_t z = (uint32_t)zero_of(x, l, g, o);
            if (!x->awq && !x->v2)
                z -= 1;
            if (x->awq)
                for (int i = 0; i < 8; i++) {
                    if (order[i] == o % 8)
                        qz[g * (out / 8) + o / 8] |= z << (4 * i);
                }
            else
                qz[g * out8 + o / 8] |= z << (4 * (o % 8));
            sc[g * out + o] = llm_fp32_to_fp16(scale_of(l, g, o));
        }
    for (int c = 0; c < in; c++)
        gi[c] = group_of(x, c, in);
    char name[128];
    snprintf(name, sizeof name, "model.layers.0.%s.qweight", lins[l].hf);
    if (x->awq)
        st_add(s, name, "I32", 2, in, out / 8, qw, (size_t)in * out / 2);
    else
        st_add(s, name, "I32", 2, in8, out, qw, (size_t)in8 * out * 4);
    snprintf(name, sizeof name, "model.layers.0.%s.qzeros", lins[l].hf);
    st_add(s, name, "I32", 2, G, out8, qz, (size_t)G * out8 * 4);
    snprintf(name, sizeof name, "model.layers.0.%s.scales", lins[l].hf);
    st_add(s, name, "F16", 2, G, out, sc, (size_t)G * out * 2);
    if (!x->awq) {
        snprintf(name, sizeof name, "model.layers.0.%s.g_idx", lins[l].hf);
        st_add(s, name, "I32", 1, in, 0, gi, (size_t)in * 4);
    }
    free(qw);
    free(qz);
    free(sc);
    free(gi);
}

static void add_f16(struct st *s, const char *name, int nd, int64_t d0, int64_t d1, float base)
{
    size_t n = (size_t)(d0 * (nd == 2 ? d1 : 1));
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = llm_fp32_to_fp16(base + (float)(i % 17) / 64.0f);
    st_add(s, name, "F16", nd, d0, d1, h, n * 2);
    free(h);
}

/* config.json, quantize config and weights; the model before the writer
 * `st` is written, so callers can corrupt it first. */
static void fixture(struct st *s, const char *dir, const struct fix *x)
{
    char cfg[2048];
    char fmt[64] = "";
    if (x->fmt)
        snprintf(fmt, sizeof fmt, ", \"checkpoint_format\": \"%s\"", x->fmt);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
             " \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d,\n"
             " \"num_hidden_layers\": 1, \"num_attention_heads\": %d,\n"
             " \"num_key_value_heads\": %d, \"max_position_embeddings\": 64,\n"
             " \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": true,\n"
             " \"quantization_config\": %s}\n",
             V, H, ff, NH, NKV,
             x->awq ? "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 32, "
                      "\"zero_point\": true, \"version\": \"gemm\"}"
                    : "");
    if (!x->awq) {
        char q[512];
        snprintf(q, sizeof q,
                 "{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": %d, "
                 "\"desc_act\": %s, \"sym\": %s%s}",
                 x->group, x->act ? "true" : "false", x->sym ? "true" : "false", fmt);
        char *p = strstr(cfg, "\"quantization_config\": ");
        snprintf(p, sizeof cfg - (size_t)(p - cfg), "\"quantization_config\": %s}\n", q);
    }
    write_text(dir, "config.json", cfg);
    add_f16(s, "model.embed_tokens.weight", 2, V, H, -0.1f);
    add_f16(s, "model.layers.0.input_layernorm.weight", 1, H, 0, 1.0f);
    add_f16(s, "model.layers.0.post_attention_layernorm.weight", 1, H, 0, 1.0f);
    add_f16(s, "model.norm.weight", 1, H, 0, 1.0f);
    for (int l = 0; l < 7; l++)
        add_lin(s, x, l);
}

static const char *make_fixture(const struct fix *x)
{
    const char *dir = llm_test_tmpdir();
    struct st s = { .n = 0 };
    fixture(&s, dir, x);
    st_write(&s, dir, 0);
    return dir;
}

/* HF row of our row r for Q/K (written from formats.md 1.10, not from hf.c) */
static int hf_row(int l, int r)
{
    if (l > 1)
        return r;
    int h = r / HD, w = r % HD, i = w / 2, j = w % 2;
    return h * HD + j * (HD / 2) + i;
}

/* Every weight equals the spec's formula element by element. */
static void check_values(struct llm_file *f, const struct fix *x, enum llm_type want)
{
    for (int l = 0; l < 7; l++) {
        char name[128];
        snprintf(name, sizeof name, "blk.0.%s.weight", lins[l].gguf);
        struct llm_tensor *t = llm_file_find(f, name);
        cr_assert(t, "%s missing", name);
        cr_assert_eq(t->type, want, "%s: type %s", name, llm_type_name(t->type));
        cr_assert_eq(t->ne[0], lins[l].in);
        cr_assert_eq(t->ne[1], lins[l].out);
        snprintf(name, sizeof name, "blk.0.%s.perm", lins[l].gguf);
        struct llm_tensor *pt = llm_file_find(f, name);
        const int32_t *perm = NULL;
        if (x->act) {
            cr_assert(pt, "%s missing", name);
            cr_assert_eq(pt->type, LLM_TYPE_I32);
            cr_assert_eq(pt->ne[0], lins[l].in);
            const void *pd;
            cr_assert_eq(llm_tensor_bytes(f, pt, &pd), LLM_OK);
            perm = pd;
            /* stable sort by c % G: even columns first, then odd (G = 2) */
            for (int i = 0; i < lins[l].in; i++)
                cr_assert_eq(perm[i], i < lins[l].in / 2 ? 2 * i : 2 * (i - lins[l].in / 2) + 1,
                             "%s[%d] = %d", name, i, perm[i]);
        } else {
            cr_assert_null(pt, "%s should not exist", name);
        }
        const void *data;
        cr_assert_eq(llm_tensor_bytes(f, t, &data), LLM_OK, "%s", llm_error_detail(LLM_E_FORMAT));
        uint64_t rb = llm_type_row_bytes(t->type, (uint64_t)lins[l].in);
        float row[128];
        for (int r = 0; r < lins[l].out; r++) {
            cr_assert_eq(llm_dequantize_row(t->type, (const uint8_t *)data + r * rb, row,
                                            lins[l].in),
                         LLM_OK);
            for (int i = 0; i < lins[l].in; i++) {
                int c = perm ? perm[i] : i;
                float w = spec_w(x, l, hf_row(l, r), c);
                cr_assert_eq(row[i], w, "%s row %d col %d: %.9g, spec %.9g", lins[l].gguf, r, i,
                             (double)row[i], (double)w);
            }
        }
    }
}

static struct llm_file *open_ok(const char *dir)
{
    struct llm_file *f = NULL;
    llm_status s = llm_import(&f, dir, NULL);
    cr_assert_eq(s, LLM_OK, "import %s: %s", dir, llm_error_detail(s));
    return f;
}

static const char *meta_s(struct llm_file *f, const char *path)
{
    const char *v = "(absent)";
    cr_expect_eq(llm_meta_get_str(f->meta, path, &v), LLM_OK, "metadata %s", path);
    return v;
}

/* Every non-tokenizer tensor of a equals the one of b byte for byte, and
 * neither has one the other lacks. */
static void same_tensors(struct llm_file *a, struct llm_file *b)
{
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        struct llm_tensor *t = &a->tensors[i];
        if (strncmp(t->name, "tokenizer.", 10) == 0)
            continue;
        na++;
        struct llm_tensor *u = llm_file_find(b, t->name);
        cr_assert(u, "tensor %s missing after the round trip", t->name);
        cr_assert_eq(u->type, t->type, "%s: type %s vs %s", t->name, llm_type_name(u->type),
                     llm_type_name(t->type));
        cr_assert_eq(u->n_dims, t->n_dims, "%s", t->name);
        cr_assert_eq(memcmp(u->ne, t->ne, sizeof t->ne), 0, "%s: shape", t->name);
        const void *da, *db;
        cr_assert_eq(llm_tensor_bytes(a, t, &da), LLM_OK);
        cr_assert_eq(llm_tensor_bytes(b, u, &db), LLM_OK, "%s: %s", t->name,
                     llm_error_detail(LLM_E_FORMAT));
        cr_assert_eq(memcmp(da, db, (size_t)t->nbytes), 0, "%s: bytes differ", t->name);
    }
    for (size_t i = 0; i < b->n_tensors; i++)
        nb += strncmp(b->tensors[i].name, "tokenizer.", 10) != 0;
    cr_assert_eq(na, nb, "%zu tensors before, %zu after", na, nb);
}

/* ---- import of hand-built checkpoints ----------------------------------- */

Test(hf_quant, gptq_v1_asym_values)
{
    struct fix x = { .group = 32, .fmt = "gptq" };
    struct llm_file *f = open_ok(make_fixture(&x));
    check_values(f, &x, LLM_TYPE_Q4_1);
    cr_expect_str_eq(meta_s(f, "quantization.method"), "gptq");
    cr_expect_str_eq(meta_s(f, "quantization.checkpoint_format"), "gptq");
    llm_file_free(f);
}

Test(hf_quant, gptq_v1_and_v2_give_the_same_model)
{
    /* v2 without a checkpoint_format key: decided by a stored zero of 15 */
    struct fix x1 = { .group = 32 }, x2 = { .group = 32, .v2 = 1 };
    struct llm_file *a = open_ok(make_fixture(&x1)), *b = open_ok(make_fixture(&x2));
    check_values(b, &x2, LLM_TYPE_Q4_1);
    same_tensors(a, b);
    cr_expect_str_eq(meta_s(b, "quantization.checkpoint_format"), "gptq_v2");
    llm_file_free(a);
    llm_file_free(b);
}

Test(hf_quant, gptq_sym_v1_and_v2_are_q4_0)
{
    /* all 7 -> v1 and all 8 -> v2, whatever checkpoint_format says */
    struct fix x1 = { .group = 32, .sym = 1, .fmt = "gptq_v2" };
    struct fix x2 = { .group = 32, .sym = 1, .v2 = 1, .fmt = "gptq" };
    struct llm_file *a = open_ok(make_fixture(&x1)), *b = open_ok(make_fixture(&x2));
    check_values(a, &x1, LLM_TYPE_Q4_0);
    same_tensors(a, b);
    llm_file_free(a);
    llm_file_free(b);
}

Test(hf_quant, gptq_per_channel)
{
    struct fix x = { .group = -1, .fmt = "gptq" };
    struct llm_file *f = open_ok(make_fixture(&x));
    check_values(f, &x, LLM_TYPE_Q4Z_CH);
    llm_file_free(f);
}

Test(hf_quant, gptq_act_order_permutes_columns)
{
    struct fix x = { .group = 32, .act = 1, .fmt = "gptq" };
    struct llm_file *f = open_ok(make_fixture(&x));
    check_values(f, &x, LLM_TYPE_Q4_1);
    int act = 0;
    cr_expect_eq(llm_meta_get_bool(f->meta, "quantization.act_order", &act), LLM_OK);
    cr_expect(act);
    llm_file_free(f);
}

Test(hf_quant, gptq_padded_last_word)
{
    /* An MLP 44 wide, as GPTQModel packs stories260K's 172: gate/up qzeros
     * and down's qweight end in a half-filled word, and down's last group
     * has 12 columns. */
    set_ff(44);
    struct fix x = { .group = 32, .fmt = "gptq" };
    struct llm_file *f = open_ok(make_fixture(&x));
    check_values(f, &x, LLM_TYPE_Q4_1);
    llm_file_free(f);
}

Test(hf_quant, awq_gemm_values)
{
    struct fix x = { .awq = 1, .group = 32 };
    struct llm_file *f = open_ok(make_fixture(&x));
    check_values(f, &x, LLM_TYPE_Q4_1);
    cr_expect_str_eq(meta_s(f, "quantization.method"), "awq");
    llm_file_free(f);
}

/* ---- bad checkpoints ----------------------------------------------------- */

static void expect_error(const char *dir, llm_status want, const char *const *parts)
{
    struct llm_file *f = NULL;
    llm_status s = llm_import(&f, dir, NULL);
    cr_assert_eq(s, want, "status %d, want %d (%s)", s, want, llm_error_detail(s));
    cr_assert_null(f);
    const char *d = llm_error_detail(s);
    cr_assert_null(strchr(d, '\n'), "one line: %s", d);
    for (; *parts; parts++)
        cr_assert(strstr(d, *parts), "'%s' not in: %s", *parts, d);
}

/* Replace tensor `name` of the fixture before writing. */
static struct st_t *find_st(struct st *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    cr_assert_fail("no fixture tensor %s", name);
    return NULL;
}

Test(hf_quant, bad_g_idx_value)
{
    const char *dir = llm_test_tmpdir();
    struct st s = { .n = 0 };
    struct fix x = { .group = 32, .fmt = "gptq" };
    fixture(&s, dir, &x);
    struct st_t *t = find_st(&s, "model.layers.0.self_attn.v_proj.g_idx");
    int32_t bad = 5;
    memcpy(t->data + 4 * 10, &bad, 4);
    st_write(&s, dir, 0);
    const char *parts[] = { "model.safetensors", "model.layers.0.self_attn.v_proj.g_idx",
                            "out of range", NULL };
    expect_error(dir, LLM_E_FORMAT, parts);
}

Test(hf_quant, bad_g_idx_group_sizes)
{
    const char *dir = llm_test_tmpdir();
    struct st s = { .n = 0 };
    struct fix x = { .group = 32, .fmt = "gptq" };
    fixture(&s, dir, &x);
    struct st_t *t = find_st(&s, "model.layers.0.mlp.up_proj.g_idx");
    int32_t one = 1;
    memcpy(t->data, &one, 4); /* group 0 loses a column to group 1 */
    st_write(&s, dir, 0);
    const char *parts[] = { "model.layers.0.mlp.up_proj.g_idx", "group 0 has 31 columns", NULL };
    expect_error(dir, LLM_E_FORMAT, parts);
}

Test(hf_quant, bad_qweight_shape)
{
    const char *dir = llm_test_tmpdir();
    struct st s = { .n = 0 };
    struct fix x = { .group = 32, .fmt = "gptq" };
    fixture(&s, dir, &x);
    struct st_t *t = find_st(&s, "model.layers.0.self_attn.k_proj.qweight");
    t->shape[0] = 16; /* [8, 16] declared [16, 8]: the same bytes */
    t->shape[1] = 8;
    st_write(&s, dir, 0);
    const char *parts[] = { "model.safetensors", "model.layers.0.self_attn.k_proj.qweight",
                            "shape [16, 8]", "expected [8, 16]", NULL };
    expect_error(dir, LLM_E_FORMAT, parts);
}

Test(hf_quant, missing_part)
{
    const char *dir = llm_test_tmpdir();
    struct st s = { .n = 0 };
    struct fix x = { .awq = 1, .group = 32 };
    fixture(&s, dir, &x);
    /* renaming qzeros makes it an unknown tensor; drop it instead */
    struct st_t *t = find_st(&s, "model.layers.0.mlp.down_proj.qzeros");
    free(t->data);
    *t = s.t[--s.n];
    st_write(&s, dir, 0);
    const char *parts[] = { "model.layers.0.mlp.down_proj.qzeros", "missing", NULL };
    expect_error(dir, LLM_E_FORMAT, parts);
}

Test(hf_quant, truncated_safetensors)
{
    const char *dir = llm_test_tmpdir();
    struct st s = { .n = 0 };
    struct fix x = { .group = 32, .fmt = "gptq" };
    fixture(&s, dir, &x);
    st_write(&s, dir, 10);
    struct llm_file *f = NULL;
    llm_status st = llm_import(&f, dir, NULL);
    cr_assert_eq(st, LLM_E_FORMAT, "%s", llm_error_detail(st));
    cr_assert(strstr(llm_error_detail(st), "model.safetensors"), "%s", llm_error_detail(st));
}

Test(hf_quant, unsupported_method_and_bits)
{
    const char *dir = make_fixture(&(struct fix){ .group = 32 });
    write_text(dir, "config.json",
               "{\"model_type\": \"llama\", \"vocab_size\": 32, \"hidden_size\": 64,"
               " \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
               " \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
               " \"max_position_embeddings\": 64,"
               " \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 2,"
               " \"group_size\": 32}}");
    const char *p1[] = { "config.json", "GPTQ with 2 bits is not supported (3, 4 and 8)", NULL };
    expect_error(dir, LLM_E_UNSUPPORTED, p1);
    write_text(dir, "config.json",
               "{\"model_type\": \"llama\", \"vocab_size\": 32, \"hidden_size\": 64,"
               " \"intermediate_size\": 64, \"num_hidden_layers\": 1,"
               " \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
               " \"max_position_embeddings\": 64,"
               " \"quantization_config\": {\"quant_method\": \"bitsandbytes\"}}");
    const char *p2[] = { "config.json", "bitsandbytes", NULL };
    expect_error(dir, LLM_E_UNSUPPORTED, p2);
}

/* ---- round trips ----------------------------------------------------------- */

static const char shape_yaml[] = "architecture: llama\n"
                                 "embedding_length: 128\n"
                                 "feed_forward_length: 256\n"
                                 "block_count: 2\n"
                                 "head_count: 4\n"
                                 "head_count_kv: 2\n"
                                 "vocab_size: 96\n"
                                 "context_length: 128\n"
                                 "rope_theta: 10000.0\n"
                                 "rms_norm_eps: 0.00001\n"
                                 "tie_embeddings: false\n";

static int is_linear(const char *name)
{
    return strncmp(name, "blk.", 4) == 0 && strstr(name, "_norm") == NULL &&
           strcmp(name + strlen(name) - 7, ".weight") == 0;
}

/* A synthetic model whose linear weights are quantized to `type` on GPTQ's
 * grid (integer zeros), as llm-quantize would; embeddings stay float. */
static struct llm_file *grid_model(const char *dir, enum llm_type type)
{
    write_text(dir, "shape.yaml", shape_yaml);
    char path[1024];
    snprintf(path, sizeof path, "%s/shape.yaml", dir);
    struct llm_file *f;
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_F16, 7), LLM_OK, "%s",
                 llm_error_detail(LLM_E_FORMAT));
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(type, &g), LLM_OK);
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct llm_tensor *t = &f->tensors[i];
        if (!is_linear(t->name))
            continue;
        int64_t in = t->ne[0], out = t->ne[1], gs = g.group ? g.group : in;
        int64_t G = (in + gs - 1) / gs;
        const void *src;
        cr_assert_eq(llm_tensor_bytes(f, t, &src), LLM_OK);
        uint64_t rb = llm_type_row_bytes(type, (uint64_t)in);
        uint8_t *dst = llm_malloc((size_t)(rb * (uint64_t)out));
        float *x = llm_malloc((size_t)in * sizeof *x);
        uint8_t *q = llm_malloc((size_t)in);
        struct llm_qgroup *p = llm_malloc((size_t)G * sizeof *p);
        for (int64_t r = 0; r < out; r++) {
            const uint16_t *h = (const uint16_t *)src + r * in;
            for (int64_t c = 0; c < in; c++)
                x[c] = llm_fp16_to_fp32(h[c]);
            for (int64_t k = 0; k < G; k++) {
                int64_t n = in - k * gs < gs ? in - k * gs : gs;
                llm_qgrid_group(&g, x + k * gs, n, &p[k]);
                for (int64_t c = 0; c < n; c++)
                    q[k * gs + c] = (uint8_t)llm_qgrid_code(&g, &p[k], x[k * gs + c]);
            }
            cr_assert_eq(llm_qgrid_pack_row(&g, q, p, in, dst + r * rb), LLM_OK);
        }
        llm_free(x);
        llm_free(q);
        llm_free(p);
        cr_assert_eq(llm_file_own(f, dst), LLM_OK);
        t->type = type;
        t->nbytes = rb * (uint64_t)out;
        t->data = dst;
        t->fill = NULL;
    }
    return f;
}

/* An act-order permutation of attn_v's columns, increasing inside each
 * group of `gs` (as the importer makes it). */
static void add_perm(struct llm_file *f, const char *weight, int64_t gs)
{
    struct llm_tensor *t = llm_file_find(f, weight);
    int64_t in = t->ne[0];
    int32_t *perm = llm_malloc((size_t)in * 4);
    int64_t n = 0;
    for (int64_t k = 0; k < in / gs; k++) /* group k: columns c with (c * 37 % in) / gs == k */
        for (int64_t c = 0; c < in; c++)
            if (c * 37 % in / gs == k)
                perm[n++] = (int32_t)c;
    cr_assert_eq(n, in);
    cr_assert_eq(llm_file_own(f, perm), LLM_OK);
    char name[LLM_MAX_NAME];
    snprintf(name, sizeof name, "%.*s.perm", (int)(strlen(weight) - 7), weight);
    cr_assert_eq(llm_file_add_tensor(f, name, LLM_TYPE_I32, 1, &in, perm, NULL), LLM_OK);
}

static struct llm_file *round_trip(struct llm_file *f, const char *dir, int method, int v2)
{
    struct llm_hfq_write_opts o;
    llm_hfq_write_opts_default(&o);
    o.method = method;
    o.gptq_v2 = v2;
    llm_status s = llm_hfq_write(f, dir, &o);
    cr_assert_eq(s, LLM_OK, "write %s: %s", dir, llm_error_detail(s));
    return open_ok(dir);
}

static void trip_all(enum llm_type type, int awq_too)
{
    const char *dir = llm_test_tmpdir();
    struct llm_file *f = grid_model(dir, type);
    char out[1024];
    snprintf(out, sizeof out, "%s/gptq", dir);
    struct llm_file *b = round_trip(f, out, LLM_HFQ_GPTQ, 0);
    same_tensors(f, b);
    llm_file_free(b);
    snprintf(out, sizeof out, "%s/gptq_v2", dir);
    b = round_trip(f, out, LLM_HFQ_GPTQ, 1);
    same_tensors(f, b);
    llm_file_free(b);
    if (awq_too) {
        snprintf(out, sizeof out, "%s/awq", dir);
        b = round_trip(f, out, LLM_HFQ_AWQ, 0);
        same_tensors(f, b);
        llm_file_free(b);
    }
    llm_file_free(f);
}

Test(hf_quant, round_trip_q4z_g128) { trip_all(LLM_TYPE_Q4Z_G128, 1); }
Test(hf_quant, round_trip_q4_1) { trip_all(LLM_TYPE_Q4_1, 1); }
Test(hf_quant, round_trip_q4_g64) { trip_all(LLM_TYPE_Q4_G64, 1); }
Test(hf_quant, round_trip_q4z_ch) { trip_all(LLM_TYPE_Q4Z_CH, 0); }
Test(hf_quant, round_trip_q8z_g32) { trip_all(LLM_TYPE_Q8Z_G32, 0); }
Test(hf_quant, round_trip_q8_g128) { trip_all(LLM_TYPE_Q8_G128, 0); }
Test(hf_quant, round_trip_q3z_g128) { trip_all(LLM_TYPE_Q3Z_G128, 0); }
Test(hf_quant, round_trip_q3z_g32) { trip_all(LLM_TYPE_Q3Z_G32, 0); }
Test(hf_quant, round_trip_q3z_ch) { trip_all(LLM_TYPE_Q3Z_CH, 0); }

/* AutoGPTQ's 3-bit pack, transcribed from its loop (formats: 32 values in
 * 3 words: v0..v9 at 3k, the low 2 bits of v10 at 30; v10's third bit at
 * 0, v11..v20 at 3k + 1, v21's low bit at 31; v21's high 2 bits at 0,
 * v22..v31 at 3k + 2), against the bit stream the importer reads and the
 * exporter writes. Two columns of a [3, 2] qweight: stride 2. */
Test(hf_quant, gptq_3bit_packing_is_autogptqs)
{
    uint32_t v[2][32], want[6] = { 0 };
    for (int o = 0; o < 2; o++)
        for (int j = 0; j < 32; j++)
            v[o][j] = (uint32_t)(j * 5 + 3 + o) % 8;
    for (int o = 0; o < 2; o++) {
        uint32_t *w0 = &want[o], *w1 = &want[2 + o], *w2 = &want[4 + o];
        const uint32_t *x = v[o];
        for (int k = 0; k < 10; k++)
            *w0 |= x[k] << (3 * k);
        *w0 |= x[10] << 30;
        *w1 |= (x[10] >> 2) & 1;
        for (int k = 0; k < 10; k++)
            *w1 |= x[11 + k] << (3 * k + 1);
        *w1 |= x[21] << 31;
        *w2 |= (x[21] >> 1) & 3;
        for (int k = 0; k < 10; k++)
            *w2 |= x[22 + k] << (3 * k + 2);
    }
    uint8_t bytes[24], got[24] = { 0 };
    for (int i = 0; i < 6; i++)
        for (int b = 0; b < 4; b++)
            bytes[4 * i + b] = (uint8_t)(want[i] >> (8 * b));
    for (int o = 0; o < 2; o++)
        for (int j = 0; j < 32; j++) {
            cr_assert_eq(llm_hfq_get(bytes, (uint64_t)o, 2, (uint64_t)j, 3), v[o][j],
                         "column %d value %d", o, j);
            llm_hfq_put(got, (uint64_t)o, 2, (uint64_t)j, 3, v[o][j]);
        }
    cr_assert(memcmp(got, bytes, sizeof got) == 0);
    cr_assert_eq(llm_hfq_per(3), 32);
    cr_assert_eq(llm_hfq_per(4), 8);
    cr_assert_eq(llm_hfq_per(8), 4);
}

Test(hf_quant, round_trip_act_order)
{
    const char *dir = llm_test_tmpdir();
    struct llm_file *f = grid_model(dir, LLM_TYPE_Q4Z_G64);
    add_perm(f, "blk.0.attn_v.weight", 64);
    add_perm(f, "blk.1.ffn_down.weight", 64);
    char out[1024];
    snprintf(out, sizeof out, "%s/gptq", dir);
    struct llm_file *b = round_trip(f, out, LLM_HFQ_GPTQ, 0);
    same_tensors(f, b);
    int act = 0;
    cr_expect_eq(llm_meta_get_bool(b->meta, "quantization.act_order", &act), LLM_OK);
    cr_expect(act);
    /* and through a .llm file */
    char llm[1100];
    snprintf(llm, sizeof llm, "%s/m.llm", dir);
    struct llm_write_opts wo;
    llm_write_opts_default(&wo);
    cr_assert_eq(llm_llm_write(b, llm, &wo), LLM_OK, "%s", llm_error_detail(LLM_E_IO));
    struct llm_file *c = open_ok(llm);
    same_tensors(f, c);
    llm_file_free(c);
    llm_file_free(b);
    /* AWQ has no g_idx */
    struct llm_hfq_write_opts o;
    llm_hfq_write_opts_default(&o);
    o.method = LLM_HFQ_AWQ;
    snprintf(out, sizeof out, "%s/awq", dir);
    llm_status s = llm_hfq_write(f, out, &o);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "blk.0.attn_v.weight"), "%s", llm_error_detail(s));
    llm_file_free(f);
}

Test(hf_quant, export_config)
{
    const char *dir = llm_test_tmpdir();
    struct llm_file *f = grid_model(dir, LLM_TYPE_Q4Z_G128);
    char out[1024];
    snprintf(out, sizeof out, "%s/gptq", dir);
    struct llm_file *b = round_trip(f, out, LLM_HFQ_GPTQ, 0);
    llm_file_free(b);
    json_error_t e;
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", out);
    json_t *cfg = json_load_file(path, 0, &e);
    cr_assert(cfg, "%s", e.text);
    json_t *q = json_object_get(cfg, "quantization_config");
    cr_expect_str_eq(json_string_value(json_object_get(q, "quant_method")), "gptq");
    cr_expect_eq(json_integer_value(json_object_get(q, "bits")), 4);
    cr_expect_eq(json_integer_value(json_object_get(q, "group_size")), 128);
    cr_expect(json_is_false(json_object_get(q, "sym")));
    cr_expect(json_is_false(json_object_get(q, "desc_act")));
    cr_expect_str_eq(json_string_value(json_object_get(q, "checkpoint_format")), "gptq");
    cr_expect_eq(json_integer_value(json_object_get(cfg, "hidden_size")), 128);
    cr_expect_eq(json_integer_value(json_object_get(cfg, "num_key_value_heads")), 2);
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/quantize_config.json", out);
    cr_expect_eq(access(path, F_OK), 0);
    llm_file_free(f);
}

Test(hf_quant, export_refuses_rtn_zero_points)
{
    /* quant.c's RTN q4_1 keeps min as the minimum: not -d * an integer */
    const char *dir = llm_test_tmpdir();
    write_text(dir, "shape.yaml", shape_yaml);
    char path[1024], out[1024];
    snprintf(path, sizeof path, "%s/shape.yaml", dir);
    struct llm_file *f;
    cr_assert_eq(llm_synthetic(&f, path, LLM_TYPE_Q4_1, 3), LLM_OK);
    snprintf(out, sizeof out, "%s/gptq", dir);
    struct llm_hfq_write_opts o;
    llm_hfq_write_opts_default(&o);
    llm_status s = llm_hfq_write(f, out, &o);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "token_embd.weight") ||
                  strstr(llm_error_detail(s), "integer zero point"),
              "%s", llm_error_detail(s));
    cr_expect_neq(access(out, F_OK), 0, "nothing written");
    /* with dequant every such tensor becomes f16, and is listed as unquantized */
    o.dequant = 1;
    s = llm_hfq_write(f, out, &o);
    cr_assert_eq(s, LLM_E_UNSUPPORTED, "no quantized linear left: %s", llm_error_detail(s));
    llm_file_free(f);
}

Test(hf_quant, export_dequant_fallback)
{
    const char *dir = llm_test_tmpdir();
    struct llm_file *f = grid_model(dir, LLM_TYPE_Q4Z_G128);
    /* one linear in RTN q4_1 (non-integer zeros): written as f16 with --dequant */
    struct llm_tensor *t = llm_file_find(f, "blk.1.ffn_up.weight");
    struct llm_tensor copy = *t;
    float *x = llm_malloc((size_t)(t->ne[0] * t->ne[1]) * 4);
    uint64_t rb = llm_type_row_bytes(LLM_TYPE_Q4_1, (uint64_t)t->ne[0]);
    uint8_t *q = llm_malloc((size_t)(rb * (uint64_t)t->ne[1]));
    for (int64_t r = 0; r < t->ne[1]; r++) {
        cr_assert_eq(llm_dequantize_row(copy.type, (const uint8_t *)copy.data +
                                                       r * llm_type_row_bytes(copy.type, (uint64_t)t->ne[0]),
                                        x + r * t->ne[0], t->ne[0]),
                     LLM_OK);
        cr_assert_eq(llm_quantize_row(LLM_TYPE_Q4_1, x + r * t->ne[0], q + r * rb, t->ne[0]),
                     LLM_OK);
    }
    cr_assert_eq(llm_file_own(f, q), LLM_OK);
    t->type = LLM_TYPE_Q4_1;
    t->data = q;
    t->nbytes = rb * (uint64_t)t->ne[1];
    char out[1024];
    snprintf(out, sizeof out, "%s/gptq", dir);
    struct llm_hfq_write_opts o;
    llm_hfq_write_opts_default(&o);
    llm_status s = llm_hfq_write(f, out, &o);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "blk.1.ffn_up.weight"), "%s", llm_error_detail(s));
    o.dequant = 1;
    s = llm_hfq_write(f, out, &o);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_file *b = open_ok(out);
    struct llm_tensor *u = llm_file_find(b, "blk.1.ffn_up.weight");
    cr_assert(u);
    cr_assert_eq(u->type, LLM_TYPE_F16);
    const void *ud;
    cr_assert_eq(llm_tensor_bytes(b, u, &ud), LLM_OK);
    for (int64_t r = 0; r < t->ne[1]; r++) {
        float row[256];
        cr_assert_eq(llm_dequantize_row(LLM_TYPE_Q4_1, q + r * rb, row, t->ne[0]), LLM_OK);
        for (int64_t c = 0; c < t->ne[0]; c++)
            cr_assert_eq(((const uint16_t *)ud)[r * t->ne[0] + c], llm_fp32_to_fp16(row[c]));
    }
    struct llm_tensor *w = llm_file_find(b, "blk.0.ffn_up.weight");
    cr_assert_eq(w->type, LLM_TYPE_Q4Z_G128);
    llm_free(x);
    llm_file_free(b);
    /* the config lists the module as not quantized */
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", out);
    json_error_t e;
    json_t *cfg = json_load_file(path, 0, &e);
    cr_assert(cfg);
    json_t *dyn = json_object_get(json_object_get(cfg, "quantization_config"), "dynamic");
    cr_assert(json_object_get(dyn, "-:^model\\.layers\\.1\\.mlp\\.up_proj$"), "dynamic: %s",
              json_dumps(dyn, 0));
    json_decref(cfg);
    llm_file_free(f);
}

Test(hf_quant, export_v1_refuses_zero_point_0)
{
    const char *dir = llm_test_tmpdir();
    struct llm_file *f = grid_model(dir, LLM_TYPE_Q4_1);
    /* a group whose zero is 0: all its weights >= 0 */
    struct llm_tensor *t = llm_file_find(f, "blk.0.attn_v.weight");
    struct llm_qgrid g;
    cr_assert_eq(llm_qgrid_of(LLM_TYPE_Q4_1, &g), LLM_OK);
    struct llm_qgroup p[4];
    uint8_t codes[128];
    cr_assert_eq(llm_qgrid_unpack_row(&g, t->data, t->ne[0], codes, p), LLM_OK);
    llm_qgrid_group_set(&g, p[0].d, 0, &p[0]);
    cr_assert_eq(llm_qgrid_pack_row(&g, codes, p, t->ne[0], (void *)t->data), LLM_OK);
    char out[1024];
    snprintf(out, sizeof out, "%s/gptq", dir);
    struct llm_hfq_write_opts o;
    llm_hfq_write_opts_default(&o);
    llm_status s = llm_hfq_write(f, out, &o);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "blk.0.attn_v.weight") &&
                  strstr(llm_error_detail(s), "v2"),
              "%s", llm_error_detail(s));
    /* v2 holds it */
    struct llm_file *b = round_trip(f, out, LLM_HFQ_GPTQ, 1);
    same_tensors(f, b);
    llm_file_free(b);
    llm_file_free(f);
}

/* ---- tokenizer files ----------------------------------------------------- */

static void same_tokenizer(struct llm_file *a, struct llm_file *b)
{
    static const char *const arrays[] = { "tokenizer.tokens", "tokenizer.token_offsets",
                                          "tokenizer.scores", "tokenizer.token_types",
                                          "tokenizer.merges", "tokenizer.merge_offsets" };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        struct llm_tensor *t = llm_file_find(a, arrays[i]), *u = llm_file_find(b, arrays[i]);
        cr_assert_eq(!t, !u, "%s in one file only", arrays[i]);
        if (!t)
            continue;
        const void *da, *db;
        cr_assert_eq(t->nbytes, u->nbytes, "%s size", arrays[i]);
        cr_assert_eq(llm_tensor_bytes(a, t, &da), LLM_OK);
        cr_assert_eq(llm_tensor_bytes(b, u, &db), LLM_OK);
        cr_assert_eq(memcmp(da, db, (size_t)t->nbytes), 0, "%s differs", arrays[i]);
    }
    static const char *const ids[] = { "tokenizer.bos_id", "tokenizer.eos_id", "tokenizer.unk_id",
                                       "tokenizer.pad_id" };
    for (size_t i = 0; i < 4; i++) {
        int64_t x = -1, y = -1;
        llm_meta_get_i64(a->meta, ids[i], &x);
        llm_meta_get_i64(b->meta, ids[i], &y);
        cr_expect_eq(x, y, "%s: %lld vs %lld", ids[i], (long long)x, (long long)y);
    }
    static const char *const flags[] = { "tokenizer.add_bos", "tokenizer.add_eos",
                                         "tokenizer.add_space_prefix" };
    for (size_t i = 0; i < 3; i++) {
        int x = -1, y = -1;
        llm_meta_get_bool(a->meta, flags[i], &x);
        llm_meta_get_bool(b->meta, flags[i], &y);
        cr_expect_eq(x, y, "%s: %d vs %d", flags[i], x, y);
    }
    llm_error_clear();
}

/* Read back DIR's tokenizer files the way the HF importer does. */
static struct llm_file *read_tokenizer(const char *dir, uint32_t n)
{
    struct llm_file *g;
    cr_assert_eq(llm_file_new(&g, dir, "hf"), LLM_OK);
    llm_status s = llm_hf_tokenizer_dir(g, dir, n, NULL);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    return g;
}

Test(hf_quant, tokenizer_model_round_trip)
{
    TEST_DATA(bin, "llama2c/stories260K.bin");
    TEST_DATA(tok, "llama2c/tok512.bin");
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    io.tokenizer_path = tok;
    struct llm_file *f;
    cr_assert_eq(llm_import(&f, bin, &io), LLM_OK, "%s", llm_error_detail(LLM_E_FORMAT));
    const char *dir = llm_test_tmpdir();
    int written = 0;
    llm_status s = llm_hf_tokenizer_write(f, dir, &written);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_assert(written);
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    cr_assert_eq(access(path, F_OK), 0);
    struct llm_file *g = read_tokenizer(dir, 512);
    same_tokenizer(f, g);
    llm_file_free(g);
    llm_file_free(f);
}

Test(hf_quant, tokenizer_json_round_trip)
{
    /* a byte-level BPE tokenizer.json, read, written and read again */
    static const char tj[] =
        "{\"version\": \"1.0\", \"added_tokens\": ["
        " {\"id\": 0, \"content\": \"<|endoftext|>\", \"special\": true},"
        " {\"id\": 9, \"content\": \"<|im_start|>\", \"special\": true},"
        " {\"id\": 10, \"content\": \"<user>\", \"special\": false, \"normalized\": true}],"
        " \"normalizer\": null,"
        " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
        "  {\"type\": \"Digits\", \"individual_digits\": true},"
        "  {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}]},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\","
        "  \"single\": [{\"SpecialToken\": {\"id\": \"<|im_start|>\", \"type_id\": 0}},"
        "             {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],"
        "  \"special_tokens\": {\"<|im_start|>\": {\"id\": \"<|im_start|>\", \"ids\": [9],"
        "   \"tokens\": [\"<|im_start|>\"]}}},"
        " \"decoder\": {\"type\": \"ByteLevel\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"<|endoftext|>\": 0, \"h\": 1, \"e\": 2,"
        "  \"l\": 3, \"o\": 4, \"he\": 5, \"ll\": 6, \"hell\": 7, \"\\u0120\": 8,"
        "  \"<|im_start|>\": 9, \"<user>\": 10},"
        "  \"merges\": [\"h e\", \"l l\", \"he ll\"]}}";
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "fixture", "hf"), LLM_OK);
    llm_status s = llm_hf_tokenizer_json(f, tj, sizeof tj - 1, "fixture", 11);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    cr_expect_str_eq(meta_s(f, "tokenizer.pre"), "smollm");
    const char *dir = llm_test_tmpdir();
    int written = 0;
    s = llm_hf_tokenizer_write(f, dir, &written);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_file *g = read_tokenizer(dir, 11);
    same_tokenizer(f, g);
    cr_expect_str_eq(meta_s(g, "tokenizer.pre"), "smollm");
    cr_expect_str_eq(meta_s(g, "tokenizer.model"), "gpt2");
    llm_file_free(g);
    /* an unknown byte-level pre-tokenizer without its regexes is refused */
    cr_assert_eq(llm_meta_set_str(f->meta, "tokenizer.pre", "tekken"), LLM_OK);
    llm_meta_del(f->meta, "tokenizer.pre_regex");
    s = llm_hf_tokenizer_write(f, dir, &written);
    cr_assert_eq(s, LLM_E_UNSUPPORTED);
    cr_assert(strstr(llm_error_detail(s), "tekken"), "%s", llm_error_detail(s));
    llm_file_free(f);
}

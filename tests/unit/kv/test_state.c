/* Tests of KV state files (kv/state.h) at the library level: a round trip
 * of every record, raw and zstd, with a last chunk shorter than the
 * others; the sampler's parameters kept; records that trade places refused
 * although each is intact (their checksums are seeded by their index); a
 * state of another shape or type refused by llm_state_expect. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "../../../lib/llm.h"

#define NL 2
#define KVD 5
#define NT 10
#define CH 3

/* the value of element j of (layer l, K or V w) at position p */
static float val(int32_t p, int l, int w, int j)
{
    return (float)(p * 1000 + l * 100 + w * 10 + j);
}

static llm_status src(void *ctx, int32_t pos, int32_t n, void *rows)
{
    (void)ctx;
    float *r = rows;
    for (int l = 0; l < NL; l++)
        for (int w = 0; w < 2; w++)
            for (int32_t p = pos; p < pos + n; p++)
                for (int j = 0; j < KVD; j++)
                    *r++ = val(p, l, w, j);
    return LLM_OK;
}

static int32_t next_pos;

static llm_status sink(void *ctx, int32_t pos, int32_t n, void *rows)
{
    (void)ctx;
    cr_assert_eq(pos, next_pos, "chunks arrive in order");
    cr_assert(n == CH || pos + n == NT, "only the last chunk is short");
    const float *r = rows;
    for (int l = 0; l < NL; l++)
        for (int w = 0; w < 2; w++)
            for (int32_t p = pos; p < pos + n; p++)
                for (int j = 0; j < KVD; j++)
                    cr_assert_eq(*r++, val(p, l, w, j));
    next_pos = pos + n;
    return LLM_OK;
}

static void info(struct llm_state_info *in, int compress)
{
    memset(in, 0, sizeof *in);
    in->model_id = 0x1234567890abcdefull;
    in->kv_type_k = in->kv_type_v = LLM_TYPE_F32;
    in->n_layers = NL;
    in->kv_dim = KVD;
    in->n_vocab = 7;
    in->n_tokens = NT;
    in->chunk = CH;
    in->compress = compress;
    llm_sampler_params_default(&in->sp);
    in->sp.temp = 0.7f;
    in->sp.top_k = 12;
    in->sp.seed = 99;
}

static void tmpname(char *buf, size_t n)
{
    snprintf(buf, n, "%s/llm-state-test-%d.kv", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
}

static const int32_t toks[NT] = { 1, 2, 3, 4, 5, 6, 0, 6, 5, 4 };
static const float logits[7] = { 0.5f, -1, 2, 3, 4, 5, 6 };

Test(state, round_trip_raw_and_zstd)
{
    char path[256];
    tmpname(path, sizeof path);
    for (int z = 0; z < 2; z++) {
        struct llm_state_info in, got;
        info(&in, z);
        cr_assert_eq(llm_state_write(path, &in, toks, logits, src, NULL), LLM_OK);
        struct llm_state_reader *r;
        cr_assert_eq(llm_state_open(&r, path, &got), LLM_OK);
        cr_assert_eq(got.model_id, in.model_id);
        cr_assert_eq(got.n_tokens, NT);
        cr_assert_eq(got.chunk, CH);
        cr_assert_eq(got.compress, z);
        cr_assert_eq(got.sp.temp, 0.7f);
        cr_assert_eq(got.sp.top_k, 12);
        cr_assert_eq(got.sp.seed, 99);
        cr_assert_eq(llm_state_expect(&got, &in, path), LLM_OK);
        int32_t t[NT];
        float lg[7];
        cr_assert_eq(llm_state_read_tokens(r, t, lg), LLM_OK);
        cr_assert_arr_eq(t, toks, sizeof t);
        cr_assert_arr_eq(lg, logits, sizeof lg);
        next_pos = 0;
        cr_assert_eq(llm_state_read_rows(r, sink, NULL), LLM_OK);
        cr_assert_eq(next_pos, NT);
        llm_state_close(r);
    }
    unlink(path);
}

Test(state, records_that_trade_places_are_refused)
{
    char path[256];
    tmpname(path, sizeof path);
    struct llm_state_info in, got;
    info(&in, 0);
    cr_assert_eq(llm_state_write(path, &in, toks, logits, src, NULL), LLM_OK);
    /* the first two KV records (positions 0-2 and 3-5) have the same size:
     * swap them */
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    const long rec = 16 + NL * 2 * CH * KVD * 4;
    const long first = 96 + (16 + NT * 4) + (16 + 7 * 4);
    char *a = malloc((size_t)rec), *b = malloc((size_t)rec);
    cr_assert(fseek(f, first, SEEK_SET) == 0 && fread(a, 1, (size_t)rec, f) == (size_t)rec &&
              fread(b, 1, (size_t)rec, f) == (size_t)rec);
    cr_assert(fseek(f, first, SEEK_SET) == 0 && fwrite(b, 1, (size_t)rec, f) == (size_t)rec &&
              fwrite(a, 1, (size_t)rec, f) == (size_t)rec);
    fclose(f);
    free(a);
    free(b);
    struct llm_state_reader *r;
    cr_assert_eq(llm_state_open(&r, path, &got), LLM_OK);
    int32_t t[NT];
    float lg[7];
    cr_assert_eq(llm_state_read_tokens(r, t, lg), LLM_OK);
    llm_status s = llm_state_read_rows(r, NULL, NULL);
    cr_assert_eq(s, LLM_E_CHECKSUM);
    cr_assert(strstr(llm_error_detail(s), "the KV rows of positions 0-2: the checksum does not match"),
              "%s", llm_error_detail(s));
    llm_state_close(r);
    unlink(path);
}

Test(state, expect_names_the_difference)
{
    struct llm_state_info a, b;
    info(&a, 0);
    info(&b, 0);
    b.kv_type_k = b.kv_type_v = LLM_TYPE_F16;
    llm_status s = llm_state_expect(&a, &b, "x.kv");
    cr_assert_eq(s, LLM_E_INVALID);
    cr_assert_str_eq(llm_error_detail(s), "x.kv: the state holds f32 KV rows, this run's cache is "
                     "f16 (--kv-type f32)");
    a.kv_type_k = LLM_TYPE_Q8_0, a.kv_type_v = LLM_TYPE_Q4_0;
    s = llm_state_expect(&a, &b, "x.kv");
    cr_assert_str_eq(llm_error_detail(s), "x.kv: the state holds q8 K and q4 V rows, this run's "
                     "cache is f16 (--kv-type-k q8 --kv-type-v q4)");
    a.kv_type_k = a.kv_type_v = LLM_TYPE_F32;
    b = a;
    b.kv_dim = 6;
    s = llm_state_expect(&a, &b, "x.kv");
    cr_assert(strstr(llm_error_detail(s), "the state's shape (2 layers, KV rows of 5, vocabulary 7) "
                     "is not this model's (2, 6, 7)"), "%s", llm_error_detail(s));
    b = a;
    b.model_id++;
    s = llm_state_expect(&a, &b, "x.kv");
    cr_assert(strstr(llm_error_detail(s), "computed by another model"));
}

/* K and V in their own types (bf16 keys, f32 values: rows of different
 * sizes in one record) make the round trip. */
static llm_status src_mixed(void *ctx, int32_t pos, int32_t n, void *rows)
{
    (void)ctx;
    uint8_t *r = rows;
    for (int l = 0; l < NL; l++)
        for (int w = 0; w < 2; w++)
            for (int32_t p = pos; p < pos + n; p++)
                for (int j = 0; j < KVD; j++) {
                    if (w == 0) {
                        uint16_t h = (uint16_t)(p * 100 + l * 10 + j);
                        memcpy(r, &h, 2), r += 2;
                    } else {
                        float f = val(p, l, w, j);
                        memcpy(r, &f, 4), r += 4;
                    }
                }
    return LLM_OK;
}

static llm_status sink_mixed(void *ctx, int32_t pos, int32_t n, void *rows)
{
    (void)ctx;
    uint8_t got[NL * 2 * CH * KVD * 4], want[NL * 2 * CH * KVD * 4];
    cr_assert_eq(src_mixed(NULL, pos, n, want), LLM_OK);
    memcpy(got, rows, (size_t)(NL * n * KVD * 6));
    cr_assert_arr_eq(got, want, (size_t)(NL * n * KVD * 6));
    next_pos = pos + n;
    return LLM_OK;
}

Test(state, k_and_v_of_different_types)
{
    char path[256];
    tmpname(path, sizeof path);
    struct llm_state_info in, got;
    info(&in, 1);
    in.kv_type_k = LLM_TYPE_BF16;
    cr_assert_eq(llm_state_write(path, &in, toks, logits, src_mixed, NULL), LLM_OK);
    struct llm_state_reader *r;
    cr_assert_eq(llm_state_open(&r, path, &got), LLM_OK);
    cr_assert_eq(got.kv_type_k, LLM_TYPE_BF16);
    cr_assert_eq(got.kv_type_v, LLM_TYPE_F32);
    int32_t t[NT];
    float lg[7];
    cr_assert_eq(llm_state_read_tokens(r, t, lg), LLM_OK);
    next_pos = 0;
    cr_assert_eq(llm_state_read_rows(r, sink_mixed, NULL), LLM_OK);
    cr_assert_eq(next_pos, NT);
    llm_state_close(r);
    unlink(path);
}

/* A version 1 header (one type for K and V at byte 24) still reads: its
 * type is both; the same word in a version 2 or 3 header is K alone.
 * Version 3 carries the window layers' first position in the flags' upper
 * bits, which an older version may not use. */
Test(state, version_1_holds_one_type_for_both)
{
    char path[256];
    tmpname(path, sizeof path);
    struct llm_state_info in, got;
    info(&in, 0);
    in.kv_type_k = LLM_TYPE_BF16;
    char path2[300];
    snprintf(path2, sizeof path2, "%s.2", path);
    cr_assert_eq(llm_state_write(path2, &in, toks, logits, src_mixed, NULL), LLM_OK);
    uint8_t h[96] = { 0 };
    FILE *f = fopen(path2, "rb");
    cr_assert(f && fread(h, 1, 96, f) == 96);
    fclose(f);
    cr_assert_eq(h[8], 3, "this build writes version 3");
    cr_assert_eq(h[24] | h[25] << 8 | h[26] << 16 | h[27] << 24, LLM_TYPE_BF16 | LLM_TYPE_F32 << 16);
    unlink(path2);
    /* the header is all that is read here: an f32 state's file, relabelled */
    info(&in, 0);
    cr_assert_eq(llm_state_write(path, &in, toks, logits, src, NULL), LLM_OK);
    f = fopen(path, "r+b");
    cr_assert(f && fread(h, 1, 96, f) == 96);
    for (int v = 1; v <= 3; v++) {
        h[8] = (uint8_t)v;
        h[24] = LLM_TYPE_F16, h[25] = h[26] = h[27] = 0;
        uint64_t x = XXH3_64bits(h, 88);
        for (int i = 0; i < 8; i++)
            h[88 + i] = (uint8_t)(x >> (8 * i));
        cr_assert(fseek(f, 0, SEEK_SET) == 0 && fwrite(h, 1, 96, f) == 96 && fflush(f) == 0);
        struct llm_state_reader *r;
        cr_assert_eq(llm_state_open(&r, path, &got), LLM_OK, "%s", llm_error_detail(-1));
        cr_assert_eq(got.kv_type_k, LLM_TYPE_F16);
        cr_assert_eq(got.kv_type_v, v == 1 ? LLM_TYPE_F16 : LLM_TYPE_F32);
        llm_state_close(r);
    }
    /* window_from: read from version 3's flags; beyond the tokens, or in an
     * older version's flags, refused */
    const uint32_t wf[][2] = { { 3, 2u << 8 }, { 3, 9999u << 8 }, { 2, 2u << 8 } };
    for (int k = 0; k < 3; k++) {
        h[8] = (uint8_t)wf[k][0];
        for (int i = 0; i < 4; i++)
            h[12 + i] = (uint8_t)(wf[k][1] >> (8 * i));
        uint64_t y = XXH3_64bits(h, 88);
        for (int i = 0; i < 8; i++)
            h[88 + i] = (uint8_t)(y >> (8 * i));
        cr_assert(fseek(f, 0, SEEK_SET) == 0 && fwrite(h, 1, 96, f) == 96 && fflush(f) == 0);
        struct llm_state_reader *r;
        llm_status s = llm_state_open(&r, path, &got);
        if (k == 0) {
            cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
            cr_assert_eq(got.window_from, 2);
            llm_state_close(r);
        } else {
            cr_assert_eq(s, LLM_E_FORMAT);
            cr_assert(strstr(llm_error_detail(s), k == 1 ? "window rows from past its tokens"
                                                         : "unknown flags"),
                      "%s", llm_error_detail(s));
        }
    }
    memset(h + 12, 0, 4);
    h[8] = 4;
    uint64_t x = XXH3_64bits(h, 88);
    for (int i = 0; i < 8; i++)
        h[88 + i] = (uint8_t)(x >> (8 * i));
    cr_assert(fseek(f, 0, SEEK_SET) == 0 && fwrite(h, 1, 96, f) == 96 && fflush(f) == 0);
    fclose(f);
    struct llm_state_reader *r;
    llm_status s = llm_state_open(&r, path, &got);
    cr_assert_eq(s, LLM_E_FORMAT);
    cr_assert(strstr(llm_error_detail(s), "KV state version 4 (this build reads 1 to 3)"), "%s",
              llm_error_detail(s));
    unlink(path);
}

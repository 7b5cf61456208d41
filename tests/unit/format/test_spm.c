/* test_spm.c: the SentencePiece tokenizer.model reader against the real
 * tok512.model, whose scores and texts are checked against tok512.bin (the
 * llama2.c export of the same model, parsed here on its own), and against
 * hand-built protobuf records. */
#include <stdint.h>
#include <string.h>

#include "../../../lib/common/alloc.h"
#include "../../../lib/common/io.h"
#include "../../../lib/format/file.h"
#include "../../../lib/format/import.h"
#include "../../../lib/format/meta.h"
#include "../helpers.h"

static struct llm_file *parse(const uint8_t *d, size_t n, llm_status *st)
{
    struct llm_file *f;
    cr_assert_eq(llm_file_new(&f, "t.model", "hf"), LLM_OK);
    *st = llm_spm_parse(f, d, n, "t.model");
    return f;
}

/* tok512.bin (formats.md §4.4): max_len, then score, len, bytes per token. */
struct l2c_tok {
    float score[512];
    char text[512][64];
    uint32_t len[512];
};

static void read_tok512_bin(const char *path, struct l2c_tok *t)
{
    struct llm_map m;
    cr_assert_eq(llm_map_open(&m, path), LLM_OK);
    const uint8_t *p = m.data + 4, *end = m.data + m.size;
    for (int i = 0; i < 512; i++) {
        cr_assert(end - p >= 8);
        memcpy(&t->score[i], p, 4);
        memcpy(&t->len[i], p + 4, 4);
        p += 8;
        cr_assert(t->len[i] < 64 && (size_t)(end - p) >= t->len[i]);
        memcpy(t->text[i], p, t->len[i]);
        p += t->len[i];
    }
    cr_expect_eq(p, end, "tok512.bin fully consumed");
    llm_map_close(&m);
}

Test(spm, tok512_against_tok512_bin)
{
    TEST_DATA(model, "llama2c/tok512.model");
    TEST_DATA(bin, "llama2c/tok512.bin");
    static struct l2c_tok ref;
    read_tok512_bin(bin, &ref);

    struct llm_map m;
    cr_assert_eq(llm_map_open(&m, model), LLM_OK);
    llm_status s;
    struct llm_file *f = parse(m.data, m.size, &s);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    cr_assert_eq(v.n_tokens, 512);
    cr_assert(v.scores && v.types);
    for (uint32_t i = 0; i < 512; i++) {
        cr_expect_eq(v.scores[i], ref.score[i], "score %u: %g vs %g", i, v.scores[i],
                     ref.score[i]);
        /* llama2.c's export: U+2581 -> ' ', BOS/EOS wrapped in newlines */
        char want[64];
        size_t wn = 0;
        const uint8_t *p = v.bytes + v.offsets[i];
        uint32_t n = v.offsets[i + 1] - v.offsets[i];
        for (uint32_t k = 0; k < n; k++) {
            if (k + 2 < n && p[k] == 0xE2 && p[k + 1] == 0x96 && p[k + 2] == 0x81) {
                want[wn++] = ' ';
                k += 2;
            } else {
                want[wn++] = (char)p[k];
            }
        }
        if (i == 1 || i == 2) {
            char tmp[64];
            snprintf(tmp, sizeof tmp, "\n%.*s\n", (int)wn, want);
            wn = strlen(tmp);
            memcpy(want, tmp, wn);
        }
        cr_expect(wn == ref.len[i] && memcmp(want, ref.text[i], wn) == 0, "token %u text", i);
        int32_t type = i == 0 ? 2 : i <= 2 ? 3 : i <= 258 ? 6 : 1;
        cr_expect_eq(v.types[i], type, "token %u type %d", i, v.types[i]);
    }
    cr_expect_eq(memcmp(v.bytes + v.offsets[3], "<0x00>", 6), 0);
    cr_expect_eq(memcmp(v.bytes + v.offsets[258], "<0xFF>", 6), 0);
    const char *str;
    int64_t id;
    int b;
    cr_expect_eq(llm_meta_get_str(f->meta, "tokenizer.model", &str), LLM_OK);
    cr_expect_str_eq(str, "llama");
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.n_tokens", &id), LLM_OK);
    cr_expect_eq(id, 512);
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.unk_id", &id), LLM_OK);
    cr_expect_eq(id, 0);
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.bos_id", &id), LLM_OK);
    cr_expect_eq(id, 1);
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.eos_id", &id), LLM_OK);
    cr_expect_eq(id, 2);
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.pad_id", &id), LLM_E_NOTFOUND,
                 "pad_id -1 (the default) means no pad token");
    cr_expect_eq(llm_meta_get_bool(f->meta, "tokenizer.add_space_prefix", &b), LLM_OK);
    cr_expect_eq(b, 1, "add_dummy_prefix defaults to true");
    llm_file_free(f);
    llm_map_close(&m);
}

Test(spm, every_truncation_is_handled)
{
    TEST_DATA(model, "llama2c/tok512.model");
    struct llm_map m;
    cr_assert_eq(llm_map_open(&m, model), LLM_OK);
    int failed = 0;
    for (size_t n = 0; n < m.size; n++) {
        llm_status s;
        struct llm_file *f = parse(m.data, n, &s);
        cr_expect(s == LLM_OK || s == LLM_E_FORMAT, "prefix %zu: status %d", n, s);
        if (s == LLM_E_FORMAT) {
            failed++;
            cr_expect(strncmp(llm_error_detail(s), "t.model: ", 9) == 0, "%s",
                      llm_error_detail(s));
        } else {
            /* a prefix ending on a record boundary is a smaller model */
            struct llm_vocab_view v;
            cr_expect_eq(llm_file_vocab(f, &v), LLM_OK);
            cr_expect(v.n_tokens >= 1 && v.n_tokens <= 512);
        }
        llm_file_free(f);
    }
    cr_expect_gt(failed, (int)m.size / 2, "most prefixes end inside a record");
    llm_map_close(&m);
}

/* A tiny model: pieces "<unk>" (UNKNOWN), "<s>" (CONTROL), "a" (score -1.5),
 * a trainer_spec with unk_id = 1, bos_id = 0, pad_id = -1 (a ten-byte
 * varint) and eos_id = 7 (past the vocabulary), and add_dummy_prefix = 0. */
static const uint8_t tiny[] = {
    0x0a, 0x09, 0x0a, 0x05, '<', 'u', 'n', 'k', '>', 0x18, 0x02,
    0x0a, 0x07, 0x0a, 0x03, '<', 's', '>', 0x18, 0x03,
    0x0a, 0x08, 0x0a, 0x01, 'a', 0x15, 0x00, 0x00, 0xc0, 0xbf,
    0x12, 0x15, 0xc0, 0x02, 0x01, 0xc8, 0x02, 0x00,
    0xd8, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    0xd0, 0x02, 0x07,
    0x1a, 0x02, 0x18, 0x00,
    0xa2, 0x06, 0x01, 0x00, /* field 100, an unknown extension: skipped */
};

Test(spm, hand_built_model)
{
    llm_status s;
    struct llm_file *f = parse(tiny, sizeof tiny, &s);
    cr_assert_eq(s, LLM_OK, "%s", llm_error_detail(s));
    struct llm_vocab_view v;
    cr_assert_eq(llm_file_vocab(f, &v), LLM_OK);
    cr_assert_eq(v.n_tokens, 3);
    cr_expect_eq(v.types[0], 2);
    cr_expect_eq(v.types[1], 3);
    cr_expect_eq(v.types[2], 1, "absent type = NORMAL");
    cr_expect_eq(v.scores[2], -1.5f);
    cr_expect_eq(v.offsets[3] - v.offsets[2], 1);
    int64_t id;
    int b;
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.unk_id", &id), LLM_OK);
    cr_expect_eq(id, 1);
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.bos_id", &id), LLM_OK);
    cr_expect_eq(id, 0);
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.pad_id", &id), LLM_E_NOTFOUND);
    cr_expect_eq(llm_meta_get_i64(f->meta, "tokenizer.eos_id", &id), LLM_E_NOTFOUND,
                 "an id past the vocabulary is dropped");
    cr_expect_eq(llm_meta_get_bool(f->meta, "tokenizer.add_space_prefix", &b), LLM_OK);
    cr_expect_eq(b, 0);
    llm_file_free(f);
}

static void expect_bad(const uint8_t *d, size_t n, const char *sub)
{
    llm_status s;
    struct llm_file *f = parse(d, n, &s);
    cr_expect_eq(s, LLM_E_FORMAT, "status %d", s);
    cr_expect(strncmp(llm_error_detail(s), "t.model: ", 9) == 0, "%s", llm_error_detail(s));
    cr_expect(strstr(llm_error_detail(s), sub), "'%s' lacks '%s'", llm_error_detail(s), sub);
    llm_file_free(f);
}

Test(spm, malformed)
{
    expect_bad(NULL, 0, "no pieces");
    static const uint8_t no_pieces[] = { 0x1a, 0x00 };
    expect_bad(no_pieces, sizeof no_pieces, "no pieces");
    static const uint8_t long_varint[] = { 0x08, 0x80, 0x80, 0x80, 0x80, 0x80,
                                           0x80, 0x80, 0x80, 0x80, 0x80, 0x01 };
    expect_bad(long_varint, sizeof long_varint, "truncated or invalid");
    static const uint8_t past_end[] = { 0x0a, 0x7f, 0x0a, 0x01, 'a' };
    expect_bad(past_end, sizeof past_end, "truncated or invalid");
    static const uint8_t pieces_varint[] = { 0x08, 0x01 };
    expect_bad(pieces_varint, sizeof pieces_varint, "wrong wire type");
    static const uint8_t score_varint[] = { 0x0a, 0x05, 0x0a, 0x01, 'a', 0x10, 0x01 };
    expect_bad(score_varint, sizeof score_varint, "piece 0: score");
    static const uint8_t bad_type[] = { 0x0a, 0x05, 0x0a, 0x01, 'a', 0x18, 0x09 };
    expect_bad(bad_type, sizeof bad_type, "piece 0: bad type");
    static const uint8_t group[] = { 0x0a, 0x03, 0x0a, 0x01, 'a', 0x0b };
    expect_bad(group, sizeof group, "truncated or invalid");
    static const uint8_t bad_inner[] = { 0x0a, 0x03, 0x0a, 0x05, 'a' };
    expect_bad(bad_inner, sizeof bad_inner, "piece 0");
    static const uint8_t bad_trainer[] = { 0x0a, 0x03, 0x0a, 0x01, 'a', 0x12, 0x02, 0xc0, 0x82 };
    expect_bad(bad_trainer, sizeof bad_trainer, "trainer_spec");
}

/* handoff.c: the prefill-to-decode stream (handoff.h). */
#include "handoff.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../common/alloc.h"
#include "../common/bytes.h"

static const char magic[8] = { 'L', 'L', 'M', 'S', 'P', 'L', 'I', 'T' };
static const char item_magic[8] = { 'L', 'L', 'M', 'S', 'I', 'T', 'E', 'M' };
static const char end_magic[8] = { 'L', 'L', 'M', 'S', 'P', 'E', 'N', 'D' };
#define ITEM_HEAD 32
/* Memory for a claimed size grows by at most this much ahead of the bytes. */
#define GROW_STEP ((size_t)64 << 20)



/* XXH3-64 of a then b, as one run of bytes. */
static llm_status sum2(const void *a, size_t na, const void *b, size_t nb, uint64_t *out)
{
    XXH3_state_t *x = XXH3_createState();
    if (!x)
        return LLM_E_NOMEM;
    XXH3_64bits_reset(x);
    XXH3_64bits_update(x, a, na);
    XXH3_64bits_update(x, b, nb);
    *out = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    return LLM_OK;
}

/* ---- writing ------------------------------------------------------------- */

llm_status llm_handoff_write_open(struct llm_handoff_writer *w, const char *path,
                                  uint64_t model_id, uint32_t kv_types, const int64_t *lines,
                                  size_t n)
{
    memset(w, 0, sizeof *w);
    LLM_TRY(llm_out_open(&w->o, path));
    uint8_t h[32];
    memcpy(h, magic, 8);
    llm_put32(h + 8, LLM_HANDOFF_VERSION);
    llm_put32(h + 12, kv_types);
    llm_put64(h + 16, model_id);
    llm_put64(h + 24, (uint64_t)n);
    uint64_t x = 0;
    uint8_t sum[8];
    llm_status s = sum2(h, sizeof h, lines, n * sizeof *lines, &x);
    llm_put64(sum, x);
    if (!s)
        s = llm_out_write(&w->o, h, sizeof h);
    if (!s)
        s = llm_out_write(&w->o, lines, n * sizeof *lines);
    if (!s)
        s = llm_out_write(&w->o, sum, sizeof sum);
    if (!s)
        s = llm_out_flush(&w->o);
    if (s)
        llm_out_abort(&w->o);
    return s;
}

llm_status llm_handoff_write_item(struct llm_handoff_writer *w, int64_t line, const char *text,
                                  size_t len, const void *state, size_t state_len)
{
    if (len > LLM_HANDOFF_MAX_TEXT || state_len > LLM_HANDOFF_MAX_STATE)
        return llm_error_set(LLM_E_INVALID, "line %lld: too large for a handoff stream",
                             (long long)line);
    uint8_t h[ITEM_HEAD], sum[8];
    memcpy(h, item_magic, 8);
    llm_put64(h + 8, (uint64_t)line);
    llm_put32(h + 16, (uint32_t)len);
    llm_put32(h + 20, 0);
    llm_put64(h + 24, (uint64_t)state_len);
    uint64_t x = 0;
    LLM_TRY(sum2(h, sizeof h, text, len, &x));
    llm_put64(sum, x);
    LLM_TRY(llm_out_write(&w->o, h, sizeof h));
    LLM_TRY(llm_out_write(&w->o, text, len));
    LLM_TRY(llm_out_write(&w->o, sum, sizeof sum));
    if (state_len)
        LLM_TRY(llm_out_write(&w->o, state, state_len));
    w->items++;
    return llm_out_flush(&w->o);
}

llm_status llm_handoff_write_close(struct llm_handoff_writer *w, int complete)
{
    llm_status s = LLM_OK;
    if (complete) {
        uint8_t e[24];
        memcpy(e, end_magic, 8);
        llm_put64(e + 8, w->items);
        llm_put64(e + 16, XXH3_64bits(e, 16));
        s = llm_out_write(&w->o, e, sizeof e);
    }
    if (s) {
        llm_out_abort(&w->o);
        return s;
    }
    return llm_out_commit(&w->o);
}

void llm_handoff_write_abort(struct llm_handoff_writer *w)
{
    llm_out_abort(&w->o);
}

/* ---- reading ------------------------------------------------------------- */

void llm_handoff_item_free(struct llm_handoff_item *it)
{
    llm_free(it->text);
    llm_free(it->state);
    memset(it, 0, sizeof *it);
}

struct llm_handoff_reader {
    int fd;
    char *name;
    int64_t *lines;             /* (n_lines) from the header */
    size_t n_lines;
    uint64_t items;             /* items read */
    /* the thread and its queue */
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* an item queued or taken, the end, stop */
    struct llm_handoff_item *q; /* (n_q) from q_head, room for cap_q */
    size_t q_head, n_q, cap_q, q_bytes, max_items, max_bytes;
    int stop;                   /* the caller is closing: the thread returns */
    int end;                    /* the thread is done: st says how */
    llm_status st;
    char msg[1024];             /* st's detail (the thread's own is thread-local) */
};

/* n bytes into p; *eof when the input ends before the first byte. The
 * stop flag is looked at while waiting, so that close never hangs on a
 * writer that sends nothing. */
static llm_status get(struct llm_handoff_reader *r, void *p, size_t n, const char *what, int *eof)
{
    uint8_t *b = p;
    size_t got = 0;
    if (eof)
        *eof = 0;
    while (got < n) {
        if (r->started) {
            pthread_mutex_lock(&r->mu);
            int stop = r->stop;
            pthread_mutex_unlock(&r->mu);
            if (stop)
                return LLM_E_INTERRUPTED;
            struct pollfd pf = { .fd = r->fd, .events = POLLIN };
            if (poll(&pf, 1, 200) == 0)
                continue;
        }
        ssize_t k = read(r->fd, b + got, n - got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k < 0)
            return llm_error_set(LLM_E_IO, "%s: read error: %s", r->name, strerror(errno));
        if (k == 0) {
            if (!got && eof) {
                *eof = 1;
                return LLM_OK;
            }
            return llm_error_set(LLM_E_FORMAT, "%s: the handoff stream ends early, in %s (cut "
                                 "short)", r->name, what);
        }
        got += (size_t)k;
    }
    return LLM_OK;
}

/* n bytes into a buffer that grows as they arrive. */
static llm_status get_grow(struct llm_handoff_reader *r, void **buf, size_t n, const char *what)
{
    size_t cap = 0, have = 0;
    *buf = NULL;
    while (have < n) {
        size_t k = n - have < GROW_STEP ? n - have : GROW_STEP;
        LLM_TRY(llm_grow(buf, &cap, have + k + 1, 1));
        LLM_TRY(get(r, (uint8_t *)*buf + have, k, what, NULL));
        have += k;
    }
    if (!*buf)
        LLM_TRY(llm_grow(buf, &cap, 1, 1));
    ((uint8_t *)*buf)[n] = 0;
    return LLM_OK;
}

llm_status llm_handoff_open(struct llm_handoff_reader **out, int fd, const char *name,
                            uint64_t *model_id, uint32_t *kv_types, const int64_t **lines,
                            size_t *n)
{
    *out = NULL;
    struct llm_handoff_reader *r = llm_calloc(1, sizeof *r);
    if (!r || !(r->name = llm_strdup(name))) {
        llm_free(r);
        return LLM_E_NOMEM;
    }
    r->fd = fd;
    uint8_t h[32], sum[8];
    int eof;
    llm_status s = get(r, h, sizeof h, "the header", &eof);
    if (!s && eof)
        s = llm_error_set(LLM_E_FORMAT, "%s: empty: no handoff stream (did the prefill side "
                          "fail?)", name);
    if (!s && memcmp(h, magic, 8))
        s = llm_error_set(LLM_E_FORMAT, "%s: not a handoff stream of llm-run --role prefill "
                          "(no LLMSPLIT magic)", name);
    if (!s && llm_get32(h + 8) != LLM_HANDOFF_VERSION)
        s = llm_error_set(LLM_E_FORMAT, "%s: handoff stream version %u (this build reads %u)",
                          name, llm_get32(h + 8), LLM_HANDOFF_VERSION);
    const uint64_t count = s ? 0 : llm_get64(h + 24);
    if (!s && count > LLM_HANDOFF_MAX_ITEMS)
        s = llm_error_set(LLM_E_FORMAT, "%s: the handoff header claims %llu requests", name,
                          (unsigned long long)count);
    void *l = NULL;
    if (!s)
        s = get_grow(r, &l, (size_t)count * sizeof(int64_t), "the header");
    r->lines = l;
    if (!s)
        s = get(r, sum, sizeof sum, "the header", NULL);
    uint64_t x = 0;
    if (!s)
        s = sum2(h, sizeof h, r->lines, (size_t)count * sizeof(int64_t), &x);
    if (!s && !llm_sum_ok(x, llm_get64(sum)))
        s = llm_error_set(LLM_E_CHECKSUM, "%s: the handoff header's checksum does not match (a "
                          "damaged stream)", name);
    for (size_t i = 1; !s && i < count; i++)
        if (r->lines[i] <= r->lines[i - 1])
            s = llm_error_set(LLM_E_FORMAT, "%s: the handoff header's line numbers are not in "
                              "order", name);
    if (s) {
        llm_handoff_close(r);
        return s;
    }
    r->n_lines = (size_t)count;
    *model_id = llm_get64(h + 16);
    *kv_types = llm_get32(h + 12);
    *lines = r->lines;
    *n = r->n_lines;
    *out = r;
    return LLM_OK;
}

/* Is line one of the header's? */
static int known_line(const struct llm_handoff_reader *r, int64_t line)
{
    size_t lo = 0, hi = r->n_lines;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->lines[mid] < line)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_lines && r->lines[lo] == line;
}

/* The next item from the stream: *got 1, or -1 at the end mark. */
static llm_status read_item(struct llm_handoff_reader *r, struct llm_handoff_item *it, int *got)
{
    memset(it, 0, sizeof *it);
    uint8_t h[ITEM_HEAD], sum[8];
    int eof;
    LLM_TRY(get(r, h, 8, "an item", &eof));
    if (eof)
        return llm_error_set(LLM_E_FORMAT, "%s: the handoff stream stops after %llu of %zu "
                             "requests, without its end mark (the prefill side was cut short)",
                             r->name, (unsigned long long)r->items, r->n_lines);
    if (!memcmp(h, end_magic, 8)) {
        LLM_TRY(get(r, h + 8, 16, "the end mark", NULL));
        if (!llm_sum_ok(XXH3_64bits(h, 16), llm_get64(h + 16)))
            return llm_error_set(LLM_E_CHECKSUM, "%s: the handoff end mark's checksum does not "
                                 "match (a damaged stream)", r->name);
        if (llm_get64(h + 8) != r->items || r->items != r->n_lines)
            return llm_error_set(LLM_E_FORMAT, "%s: the handoff stream ends after %llu items, "
                                 "where its end mark counts %llu and its header %zu", r->name,
                                 (unsigned long long)r->items,
                                 (unsigned long long)llm_get64(h + 8), r->n_lines);
        uint8_t more;
        LLM_TRY(get(r, &more, 1, "", &eof));
        if (!eof)
            return llm_error_set(LLM_E_FORMAT, "%s: bytes follow the handoff stream's end mark",
                                 r->name);
        *got = -1;
        return LLM_OK;
    }
    if (memcmp(h, item_magic, 8))
        return llm_error_set(LLM_E_FORMAT, "%s: item %llu of the handoff stream has no LLMSITEM "
                             "mark (a damaged stream)", r->name,
                             (unsigned long long)r->items + 1);
    LLM_TRY(get(r, h + 8, ITEM_HEAD - 8, "an item's head", NULL));
    const int64_t line = (int64_t)llm_get64(h + 8);
    const uint64_t tl = llm_get32(h + 16), sl = llm_get64(h + 24);
    if (llm_get32(h + 20) || sl > LLM_HANDOFF_MAX_STATE || tl > LLM_HANDOFF_MAX_TEXT)
        return llm_error_set(LLM_E_FORMAT, "%s: item %llu of the handoff stream has a bad head "
                             "(a damaged stream)", r->name, (unsigned long long)r->items + 1);
    void *text = NULL, *state = NULL;
    llm_status s = get_grow(r, &text, (size_t)tl, "a request line");
    if (!s)
        s = get(r, sum, sizeof sum, "a request line", NULL);
    uint64_t x = 0;
    if (!s)
        s = sum2(h, sizeof h, text, (size_t)tl, &x);
    if (!s && !llm_sum_ok(x, llm_get64(sum)))
        s = llm_error_set(LLM_E_CHECKSUM, "%s: the handoff item of line %lld: the checksum does "
                          "not match (a damaged stream)", r->name, (long long)line);
    if (!s && !known_line(r, line))
        s = llm_error_set(LLM_E_FORMAT, "%s: the handoff stream has an item for line %lld, "
                          "which its header does not list", r->name, (long long)line);
    if (!s && sl)
        s = get_grow(r, &state, (size_t)sl, "a request's state");
    if (s) {
        llm_free(text);
        llm_free(state);
        return s;
    }
    r->items++;
    *it = (struct llm_handoff_item){ .line = line, .text = text, .len = (size_t)tl,
                                     .state = state, .state_len = (size_t)sl };
    *got = 1;
    return LLM_OK;
}

static size_t item_bytes(const struct llm_handoff_item *it)
{
    return it->len + it->state_len;
}

static void *reader_main(void *arg)
{
    struct llm_handoff_reader *r = arg;
    for (;;) {
        struct llm_handoff_item it;
        int got = 0;
        llm_status s = read_item(r, &it, &got);
        pthread_mutex_lock(&r->mu);
        if (s || got < 0) {
            r->end = 1;
            r->st = s;
            if (s)
                snprintf(r->msg, sizeof r->msg, "%s", llm_error_detail(s));
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        /* wait for room: at least one item is always taken */
        while (!r->stop && r->n_q &&
               (r->n_q >= r->max_items || r->q_bytes + item_bytes(&it) > r->max_bytes))
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop) {
            pthread_mutex_unlock(&r->mu);
            llm_handoff_item_free(&it);
            return NULL;
        }
        if (r->q_head + r->n_q == r->cap_q && r->q_head) { /* move to the front */
            memmove(r->q, r->q + r->q_head, r->n_q * sizeof *r->q);
            r->q_head = 0;
        }
        void *p = r->q;
        s = llm_grow(&p, &r->cap_q, r->q_head + r->n_q + 1, sizeof *r->q);
        if (s) {
            r->end = 1;
            r->st = s;
            snprintf(r->msg, sizeof r->msg, "%s", llm_error_detail(s));
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            llm_handoff_item_free(&it);
            return NULL;
        }
        r->q = p;
        r->q[r->q_head + r->n_q++] = it;
        r->q_bytes += item_bytes(&it);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

llm_status llm_handoff_start(struct llm_handoff_reader *r, size_t max_items, size_t max_bytes)
{
    if (r->started)
        return LLM_OK;
    r->max_items = max_items ? max_items : 1;
    r->max_bytes = max_bytes;
    if (pthread_mutex_init(&r->mu, NULL))
        return LLM_E_NOMEM;
    if (pthread_cond_init(&r->cv, NULL)) {
        pthread_mutex_destroy(&r->mu);
        return LLM_E_NOMEM;
    }
    r->started = 1;
    if (pthread_create(&r->th, NULL, reader_main, r)) {
        r->started = 0;
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        return llm_error_set(LLM_E_NOMEM, "%s: cannot start a reading thread", r->name);
    }
    return LLM_OK;
}

llm_status llm_handoff_next(struct llm_handoff_reader *r, int wait, struct llm_handoff_item *it,
                            int *got)
{
    memset(it, 0, sizeof *it);
    *got = 0;
    if (!r->started)
        return read_item(r, it, got);
    pthread_mutex_lock(&r->mu);
    while (wait && !r->n_q && !r->end)
        pthread_cond_wait(&r->cv, &r->mu);
    llm_status s = LLM_OK;
    if (r->n_q) {
        *it = r->q[r->q_head++];
        r->n_q--;
        r->q_bytes -= item_bytes(it);
        *got = 1;
        pthread_cond_broadcast(&r->cv);
    } else if (r->end) {
        s = r->st ? llm_error_set(r->st, "%s", r->msg) : LLM_OK;
        *got = r->st ? 0 : -1;
    }
    pthread_mutex_unlock(&r->mu);
    return s;
}

void llm_handoff_close(struct llm_handoff_reader *r)
{
    if (!r)
        return;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->stop = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        for (size_t i = 0; i < r->n_q; i++)
            llm_handoff_item_free(&r->q[r->q_head + i]);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
    }
    llm_free(r->q);
    llm_free(r->lines);
    llm_free(r->name);
    llm_free(r);
}

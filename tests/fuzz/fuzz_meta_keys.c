/* fuzz_meta_keys.c: maps of many keys (the hash index of lib/format/meta.c)
 * against a plain list. The input is cut into keys at newlines; each key is
 * put, replacing an equal one, and a key that starts with '-' deletes the
 * rest of it. The input is repeated with a counter appended until the map
 * passes a thousand keys, so that the index grows, rebuilds and meets
 * collisions. After every step the map must hold the list's keys, in its
 * order, each found by llm_meta_child; the YAML written from it must read
 * back with the same keys. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/common/alloc.h"
#include "../../lib/format/meta.h"

#define MAX_KEYS 1024

static char *list[MAX_KEYS]; /* the reference: the keys in order */
static int64_t vals[MAX_KEYS];
static size_t n_list;

static size_t find(const char *k)
{
    for (size_t i = 0; i < n_list; i++)
        if (!strcmp(list[i], k))
            return i;
    return SIZE_MAX;
}

static void check(const struct llm_meta *m)
{
    if (m->n != n_list)
        abort();
    for (size_t i = 0; i < n_list; i++) {
        if (strcmp(m->items[i]->key, list[i]) || m->items[i]->i != vals[i])
            abort();
        if (llm_meta_child(m, list[i]) != m->items[i])
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyz0123456789_."; /* 38 */
    if (size > 4096)
        return 0;
    struct llm_meta *root = llm_meta_new(LLM_META_MAP), *m = llm_meta_new(LLM_META_MAP);
    if (!root || !m || llm_meta_put(root, "m", m) != LLM_OK) {
        llm_meta_free(root);
        return 0;
    }
    n_list = 0;
    int64_t step = 0;
    for (int round = 0; round < 32 && n_list < MAX_KEYS - 256; round++) {
        size_t start = 0;
        for (size_t i = 0; i <= size && n_list < MAX_KEYS - 1; i++) {
            if (i < size && data[i] != '\n')
                continue;
            int del = i > start && data[start] == '-';
            char key[96];
            size_t len = 0;
            for (size_t j = start + (size_t)del; j < i && len < 64; j++)
                key[len++] = alpha[data[j] % 38];
            start = i + 1;
            if (!len)
                continue;
            /* a round's counter makes the keys of later rounds new */
            len += (size_t)snprintf(key + len, sizeof key - len, "_%d", round);
            if (del) {
                if (strchr(key, '.'))
                    continue; /* a dotted path would walk into the key */
                char path[128];
                snprintf(path, sizeof path, "m.%s", key);
                llm_meta_del(root, path);
                size_t at = find(key);
                if (at != SIZE_MAX) {
                    free(list[at]);
                    memmove(list + at, list + at + 1, (n_list - at - 1) * sizeof *list);
                    memmove(vals + at, vals + at + 1, (n_list - at - 1) * sizeof *vals);
                    n_list--;
                }
            } else {
                step++;
                if (llm_meta_put(m, key, llm_meta_new_i64(step)) != LLM_OK)
                    abort();
                size_t at = find(key);
                if (at == SIZE_MAX) {
                    if (!(list[n_list] = strdup(key)))
                        abort();
                    at = n_list++;
                }
                vals[at] = step;
            }
            if (step % 97 == 0)
                check(m);
        }
    }
    check(m);
    /* written and read back: the same keys, found again */
    char *y;
    size_t n;
    if (llm_meta_emit_yaml(root, &y, &n) == LLM_OK) {
        struct llm_meta *b = NULL;
        if (llm_meta_parse_yaml(&b, y, n, "re.yaml") != LLM_OK)
            abort();
        struct llm_meta *bm = llm_meta_child(b, "m");
        if (n_list ? !bm : bm && bm->kind == LLM_META_MAP && bm->n)
            abort();
        if (n_list)
            check(bm);
        llm_meta_free(b);
        llm_free(y);
    }
    llm_meta_free(root);
    for (size_t i = 0; i < n_list; i++)
        free(list[i]);
    return 0;
}

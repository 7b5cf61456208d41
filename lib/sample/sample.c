/* sample.c: penalties, truncation (top-k, top-p, min-p), temperature and
 * the draw. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"

struct cand {
    int32_t id;
    float logit;
    float p;
};

struct llm_sampler {
    struct llm_sampler_params p;
    int32_t n_vocab;
    struct llm_rng rng;
    int32_t *hist;      /* ring of the last hist_cap tokens */
    size_t hist_cap, hist_n, hist_pos;
    int32_t *counts;    /* (n_vocab) scratch */
    struct cand *cands; /* (n_vocab) */
};

void llm_sampler_params_default(struct llm_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
    p->seed = 0;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void llm_rng_seed(struct llm_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t llm_rng_next(struct llm_rng *r)
{
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

double llm_rng_uniform(struct llm_rng *r)
{
    return (double)(llm_rng_next(r) >> 11) * 0x1.0p-53;
}

llm_status llm_sampler_new(struct llm_sampler **out, const struct llm_sampler_params *p,
                           int32_t n_vocab)
{
    *out = NULL;
    if (n_vocab <= 0)
        return llm_error_set(LLM_E_INVALID, "sampler: vocabulary of %d tokens", n_vocab);
    if (!(p->temp >= 0) || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->repeat_penalty > 0) || !isfinite(p->presence_penalty) ||
        !isfinite(p->frequency_penalty) || p->penalty_last_n < -1)
        return llm_error_set(LLM_E_INVALID, "sampler: parameter out of range (temp %g, top-p %g, "
                             "min-p %g, repeat penalty %g, last-n %d)", (double)p->temp,
                             (double)p->top_p, (double)p->min_p, (double)p->repeat_penalty,
                             p->penalty_last_n);
    struct llm_sampler *s = llm_calloc(1, sizeof *s);
    if (!s)
        return LLM_E_NOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->penalty_last_n < 0 ? 1024 : (size_t)p->penalty_last_n;
    s->hist = llm_calloc(s->hist_cap ? s->hist_cap : 1, sizeof(int32_t));
    s->counts = llm_calloc((size_t)n_vocab, sizeof(int32_t));
    s->cands = llm_calloc((size_t)n_vocab, sizeof(struct cand));
    if (!s->hist || !s->counts || !s->cands) {
        llm_sampler_free(s);
        return LLM_E_NOMEM;
    }
    llm_rng_seed(&s->rng, p->seed);
    *out = s;
    return LLM_OK;
}

void llm_sampler_free(struct llm_sampler *s)
{
    if (!s)
        return;
    llm_free(s->hist);
    llm_free(s->counts);
    llm_free(s->cands);
    llm_free(s);
}

void llm_sampler_reset(struct llm_sampler *s)
{
    s->hist_n = s->hist_pos = 0;
    llm_rng_seed(&s->rng, s->p.seed);
}

void llm_sampler_accept(struct llm_sampler *s, int32_t token)
{
    if (s->p.penalty_last_n < 0 && s->hist_n == s->hist_cap) {
        /* -1 means the whole history: grow the ring (kept in order). */
        void *h = s->hist;
        size_t cap = s->hist_cap;
        if (llm_grow(&h, &cap, s->hist_cap * 2, sizeof(int32_t)) == LLM_OK) {
            s->hist = h;
            s->hist_pos = s->hist_n;
            s->hist_cap = cap;
        }
    }
    if (!s->hist_cap)
        return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
    if (s->hist_n < s->hist_cap)
        s->hist_n++;
}

static void apply_penalties(struct llm_sampler *s, float *logits)
{
    const struct llm_sampler_params *p = &s->p;
    if (!s->hist_n || (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f &&
                       p->frequency_penalty == 0.0f))
        return;
    for (size_t i = 0; i < s->hist_n; i++) {
        int32_t t = s->hist[i];
        if (t >= 0 && t < s->n_vocab)
            s->counts[t]++;
    }
    for (size_t i = 0; i < s->hist_n; i++) {
        int32_t t = s->hist[i];
        if (t < 0 || t >= s->n_vocab || !s->counts[t])
            continue;
        /* llama.cpp: divide positive logits, multiply negative ones. */
        float *l = &logits[t];
        if (*l <= 0)
            *l *= p->repeat_penalty;
        else
            *l /= p->repeat_penalty;
        *l -= (float)s->counts[t] * p->frequency_penalty + p->presence_penalty;
        s->counts[t] = 0;
    }
}

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Move the k largest to the front, sorted. */
static void partial_sort(struct cand *c, int32_t n, int32_t k)
{
    if (k >= n || n <= 4096) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return;
    }
    /* Selection by a threshold: keep the candidates above the k-th largest
     * value found with a bounded insertion buffer. */
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m < k) {
            struct cand t = c[i];
            int32_t j = m++;
            while (j > 0 && cmp_cand(&c[j - 1], &t) > 0) {
                c[j] = c[j - 1];
                j--;
            }
            c[j] = t;
        } else if (cmp_cand(&c[i], &c[k - 1]) < 0) {
            struct cand t = c[i];
            int32_t j = k - 1;
            c[i] = c[k - 1];
            while (j > 0 && cmp_cand(&c[j - 1], &t) > 0) {
                c[j] = c[j - 1];
                j--;
            }
            c[j] = t;
        }
    }
}

/* The arg-max (ties to the lowest id). */
static int32_t argmax(const float *logits, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* After the penalties (temp > 0): the candidates that survive top-k, top-p
 * and min-p at the front of s->cands, most likely first, each with its
 * weight exp((logit - max) / temp) in .p; *sum receives their total.
 * Returns how many. */
static int32_t weigh(struct llm_sampler *s, const float *logits, double *sum_out)
{
    const struct llm_sampler_params *p = &s->p;
    int32_t n = s->n_vocab;
    struct cand *c = s->cands;
    for (int32_t i = 0; i < n; i++)
        c[i] = (struct cand){ i, logits[i], 0 };
    int32_t k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    partial_sort(c, n, k);
    n = k;
    /* softmax of the survivors (without temperature, as llama.cpp's top-p
     * and min-p see it) */
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - c[0].logit);
        sum += c[i].p;
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < n; i++) {
            cum += c[i].p / sum;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        /* c[0] has the largest probability: keep p >= min_p * p_max. */
        int32_t keep = 1;
        while (keep < n && c[keep].p >= p->min_p * c[0].p)
            keep++;
        n = keep;
    }
    sum = 0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / p->temp);
        sum += c[i].p;
    }
    *sum_out = sum;
    return n;
}

int32_t llm_sampler_sample(struct llm_sampler *s, float *logits)
{
    apply_penalties(s, logits);
    if (s->p.temp <= 0.0f)
        return argmax(logits, s->n_vocab);
    double sum;
    const int32_t n = weigh(s, logits, &sum);
    const struct cand *c = s->cands;
    double r = llm_rng_uniform(&s->rng) * sum, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc)
            return c[i].id;
    }
    return c[n - 1].id;
}

int32_t llm_sampler_dist(struct llm_sampler *s, float *logits, int32_t *ids, float *probs)
{
    apply_penalties(s, logits);
    if (s->p.temp <= 0.0f) {
        ids[0] = argmax(logits, s->n_vocab);
        probs[0] = 1;
        return 1;
    }
    double sum;
    const int32_t n = weigh(s, logits, &sum);
    for (int32_t i = 0; i < n; i++) {
        ids[i] = s->cands[i].id;
        probs[i] = (float)(s->cands[i].p / sum);
    }
    return n;
}

double llm_sampler_uniform(struct llm_sampler *s)
{
    return llm_rng_uniform(&s->rng);
}

const struct llm_sampler_params *llm_sampler_params_of(const struct llm_sampler *s)
{
    return &s->p;
}

float llm_logprob(const float *logits, int32_t n_vocab, int32_t id)
{
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    return (float)((double)logits[id] - mx - log(sum));
}

int32_t llm_top_logprobs(const float *logits, int32_t n_vocab, int32_t k, int32_t *ids, float *lp)
{
    if (k > n_vocab)
        k = n_vocab;
    if (k <= 0)
        return 0;
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    double lse = log(sum) + mx;
    int32_t m = 0;
    /* insertion into a sorted list of k: O(n k), k is small */
    for (int32_t i = 0; i < n_vocab; i++) {
        if (m == k && logits[i] <= logits[ids[k - 1]])
            continue;
        int32_t j = m < k ? m++ : k - 1;
        while (j > 0 && logits[ids[j - 1]] < logits[i]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    for (int32_t i = 0; i < m; i++)
        lp[i] = (float)((double)logits[ids[i]] - lse);
    return m;
}

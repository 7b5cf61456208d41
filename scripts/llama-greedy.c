/*
 * llama-greedy.c: greedy decoding of a GGUF model by llama.cpp from token
 * ids, an independent reference for our own greedy tokens
 * (scripts/greedy-llama-cpp.sh runs it on the architecture tests' shapes).
 *
 *   llama-greedy [-n N] [--scale K] [--logits FILE] [-v] MODEL.gguf ID...
 *
 * The prompt IDs are decoded as one batch (positions 0..), then N (8)
 * tokens are taken by argmax, each fed back. Prints two lines:
 *
 *   greedy T1 ... TN
 *   margin M1 ... MN     (top-1 minus top-2 logit of the row each Ti came from)
 *
 * --scale K multiplies every f32 tensor of two or more dimensions (the
 * weight matrices and 3-D expert stacks, not the norms nor 1-D gates) by K
 * in a temporary copy of the GGUF first, as tests/unit/helpers.h's
 * llm_test_scale_weights does for the unit tests (K = 12 there).
 * --logits FILE writes the logits of every prompt position, one row a line
 * (as after the header of tests/unit/model/ref/NAME.txt). llama.cpp's
 * messages go to stderr at warning level and above (all of them with -v).
 * The KV cache is f32, one sequence, no flash attention, 2 threads.
 *
 * Written against llama.h of llama.cpp b4748 (c392e509):
 *
 *   L=/path/llama.cpp
 *   cc -O2 -std=c11 -o llama-greedy scripts/llama-greedy.c -I$L/include \
 *      -I$L/ggml/include -L$L/build/bin -lllama -lggml -lggml-base \
 *      -Wl,-rpath,$L/build/bin -lm
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggml.h"
#include "gguf.h"
#include "llama.h"

static int verbose;
static enum ggml_log_level last_level = GGML_LOG_LEVEL_INFO;

static void log_cb(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level != GGML_LOG_LEVEL_CONT)
        last_level = level;
    if (verbose || last_level >= GGML_LOG_LEVEL_WARN)
        fputs(text, stderr);
}

static void usage(void)
{
    fputs("usage: llama-greedy [-n N] [--scale K] [--logits FILE] [-v] MODEL.gguf ID...\n", stderr);
    exit(2);
}

/* MODEL with its f32 matrices times k, written to a temporary file whose
 * name goes to out (the caller removes it). */
static int scale_copy(const char *model, float k, char *out, size_t n_out)
{
    struct ggml_context *meta = NULL;
    struct gguf_init_params p = { .no_alloc = false, .ctx = &meta };
    struct gguf_context *g = gguf_init_from_file(model, p);
    if (!g) {
        fprintf(stderr, "llama-greedy: %s: not a GGUF file that ggml reads\n", model);
        return -1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(out, n_out, "%s/llama-greedy-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(out);
    if (fd < 0) {
        perror("llama-greedy: mkstemp");
        gguf_free(g);
        ggml_free(meta);
        return -1;
    }
    close(fd);
    /* a new context: the metadata, then the tensors in their order */
    struct gguf_context *o = gguf_init_empty();
    gguf_set_kv(o, g);
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        struct ggml_tensor *t = ggml_get_tensor(meta, gguf_get_tensor_name(g, i));
        if (t->type == GGML_TYPE_F32 && ggml_n_dims(t) >= 2) {
            float *w = t->data;
            for (int64_t j = 0; j < ggml_nelements(t); j++)
                w[j] *= k;
        }
        gguf_add_tensor(o, t);
    }
    int ok = gguf_write_to_file(o, out, false);
    gguf_free(o);
    gguf_free(g);
    ggml_free(meta);
    if (!ok) {
        fprintf(stderr, "llama-greedy: cannot write %s\n", out);
        unlink(out);
        return -1;
    }
    return 0;
}

static int argmax(const float *x, int n, float *margin)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    float second = -FLT_MAX;
    for (int i = 0; i < n; i++)
        if (i != best && x[i] > second)
            second = x[i];
    *margin = x[best] - second;
    return best;
}

int main(int argc, char **argv)
{
    int n_gen = 8;
    float scale = 0;
    const char *logits_path = NULL;
    int a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-n") && a + 1 < argc)
            n_gen = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--scale") && a + 1 < argc)
            scale = strtof(argv[++a], NULL);
        else if (!strcmp(argv[a], "--logits") && a + 1 < argc)
            logits_path = argv[++a];
        else if (!strcmp(argv[a], "-v"))
            verbose = 1;
        else
            usage();
    }
    if (argc - a < 2 || n_gen < 1)
        usage();
    const char *model_path = argv[a++];
    const int n_prompt = argc - a;
    llama_token *prompt = malloc(sizeof *prompt * (size_t)n_prompt);
    for (int i = 0; i < n_prompt; i++)
        prompt[i] = atoi(argv[a + i]);

    llama_log_set(log_cb, NULL);
    ggml_log_set(log_cb, NULL);
    llama_backend_init();

    char scaled[4096] = "";
    if (scale != 0) {
        if (scale_copy(model_path, scale, scaled, sizeof scaled))
            return 1;
        model_path = scaled;
    }
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (*scaled)
        unlink(scaled);
    if (!model) {
        fprintf(stderr, "llama-greedy: llama.cpp cannot load the model\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= n_vocab) {
            fprintf(stderr, "llama-greedy: token %d is not in the vocabulary (%d)\n", prompt[i],
                    n_vocab);
            return 1;
        }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_gen);
    cp.n_batch = cp.n_ubatch = (uint32_t)n_prompt;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn = false;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama-greedy: llama.cpp cannot make a context\n");
        return 1;
    }

    /* the prompt, with the logits of every position */
    struct llama_batch b = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = prompt[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n_prompt;
    if (llama_decode(ctx, b)) {
        fprintf(stderr, "llama-greedy: llama_decode failed on the prompt\n");
        return 1;
    }
    if (logits_path) {
        FILE *f = fopen(logits_path, "w");
        if (!f) {
            perror(logits_path);
            return 1;
        }
        for (int i = 0; i < n_prompt; i++) {
            const float *row = llama_get_logits_ith(ctx, i);
            for (int j = 0; j < n_vocab; j++)
                fprintf(f, "%.7g%c", row[j], j + 1 < n_vocab ? ' ' : '\n');
        }
        if (fclose(f)) {
            perror(logits_path);
            return 1;
        }
    }

    int *out = malloc(sizeof *out * (size_t)n_gen);
    float *margin = malloc(sizeof *margin * (size_t)n_gen);
    llama_token t = (llama_token)argmax(llama_get_logits_ith(ctx, n_prompt - 1), n_vocab, &margin[0]);
    for (int i = 0; i < n_gen; i++) {
        out[i] = t;
        if (i + 1 == n_gen)
            break;
        if (llama_decode(ctx, llama_batch_get_one(&t, 1))) {
            fprintf(stderr, "llama-greedy: llama_decode failed at step %d\n", i);
            return 1;
        }
        t = (llama_token)argmax(llama_get_logits_ith(ctx, -1), n_vocab, &margin[i + 1]);
    }
    printf("greedy");
    for (int i = 0; i < n_gen; i++)
        printf(" %d", out[i]);
    printf("\nmargin");
    for (int i = 0; i < n_gen; i++)
        printf(" %.4g", margin[i]);
    printf("\n");

    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(out);
    free(margin);
    free(prompt);
    return 0;
}

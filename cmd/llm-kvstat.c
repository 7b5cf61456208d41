/* llm-kvstat: KV-cache arithmetic for a model: bytes per token, sequence and
 * batch, capacity of a memory budget, paged versus contiguous waste. */
#include <stdlib.h>
#include <string.h>

#include "../lib/llm.h"

enum { OPT_PRESET = 256, OPT_CONFIG, OPT_KV_TYPE, OPT_KV_TYPE_K, OPT_KV_TYPE_V, OPT_CTX, OPT_BATCH, OPT_BLOCK, OPT_MEM, OPT_WEIGHTS,
       OPT_LENGTHS, OPT_SYNTH, OPT_SEED, OPT_JSON, OPT_LIST, OPT_SHARED, OPT_TRACE, OPT_PLOT,
       OPT_STEP };

static const struct llm_opt opts[] = {
    { OPT_PRESET, "preset", LLM_ARG_REQUIRED, "NAME", "use the published shape of NAME (see --list-presets)",
      "llama-2-7b llama-2-13b llama-2-70b llama-3-8b llama-3-70b llama-3.1-8b mistral-7b mixtral-8x7b qwen3-0.6b qwen3-30b-a3b gemma2-2b gemma3-270m phi-3-mini-4k qwen2-0.5b qwen2-7b smollm2-135m stories260k" },
    { OPT_CONFIG, "config", LLM_ARG_REQUIRED, "FILE", "read the shape from a Hugging Face config.json (or DIR/config.json)", "file" },
    { OPT_KV_TYPE, "kv-type", LLM_ARG_REQUIRED, "TYPE", "KV element type: f32, f16, bf16, fp8, int8, q8, q4 or q4ch (keys per channel, values q4) (default: f16)", "f32 f16 bf16 fp8 int8 q8 q4 q4ch" },
    { OPT_KV_TYPE_K, "kv-type-k", LLM_ARG_REQUIRED, "TYPE", "the keys' type alone (as llm-run's option)", "f32 f16 bf16 fp8 int8 q8 q4 q4ch" },
    { OPT_KV_TYPE_V, "kv-type-v", LLM_ARG_REQUIRED, "TYPE", "the values' type alone", "f32 f16 bf16 fp8 int8 q8 q4" },
    { OPT_CTX, "ctx", LLM_ARG_REQUIRED, "N", "tokens per sequence (default: the model's trained context)", NULL },
    { OPT_BATCH, "batch", LLM_ARG_REQUIRED, "N", "sequences in a batch (default: 1)", NULL },
    { OPT_BLOCK, "block-size", LLM_ARG_REQUIRED, "B", "tokens per paged KV block (default: 16)", NULL },
    { OPT_STEP, "step-tokens", LLM_ARG_REQUIRED, "N", "tokens of a forward pass, as llm-run --batch --step-tokens: bounds the sliding-window layers' rows (default: 512)", NULL },
    { OPT_SHARED, "shared-prefix", LLM_ARG_REQUIRED, "N", "the --batch sequences share their first N tokens (forks of one prompt): blocks saved", NULL },
    { OPT_MEM, "mem", LLM_ARG_REQUIRED, "SIZE", "memory budget, e.g. 80G: tokens, blocks and sequences that fit", NULL },
    { OPT_WEIGHTS, "weights", LLM_ARG_REQUIRED, "SIZE", "bytes of weights to take off --mem (default: a MODEL's, else 0)", NULL },
    { OPT_LENGTHS, "lengths", LLM_ARG_REQUIRED, "FILE", "sequence lengths, one per line: paged vs contiguous waste", "file" },
    { OPT_SYNTH, "lengths-synthetic", LLM_ARG_REQUIRED, "SPEC", "uniform:MIN:MAX:N or normal:MEAN:SD:N lengths", NULL },
    { OPT_SEED, "seed", LLM_ARG_REQUIRED, "N", "seed for --lengths-synthetic (default: 1)", NULL },
    { OPT_TRACE, "trace", LLM_ARG_REQUIRED, "FILE", "summarize a KV trace of llm-run --batch --kv-trace ('-' = stdin), with a chart", "file" },
    { OPT_PLOT, "plot", LLM_ARG_REQUIRED, "FILE", "with --trace: also draw the trace as an SVG plot in FILE", "file" },
    { OPT_JSON, "json", LLM_ARG_NONE, NULL, "print one JSON object instead of a table", NULL },
    { OPT_LIST, "list-presets", LLM_ARG_NONE, NULL, "print the presets and their shapes", NULL },
};

static struct llm_cli cli = {
    .prog = "llm-kvstat",
    .synopsis = "[OPTIONS] MODEL\n"
                "[OPTIONS] --preset NAME\n"
                "[OPTIONS] --config FILE\n"
                "--trace FILE [--plot FILE.svg] [--json]\n"
                "--list-presets",
    .summary = "KV-cache arithmetic: bytes per token, sequence and batch; what fits in a memory\n"
               "budget; paged versus contiguous allocation.",
    .opts = opts,
    .n_opts = sizeof opts / sizeof opts[0],
    .footer = "MODEL is a .llm or GGUF file, a llama2.c checkpoint or a Hugging Face model directory.\n"
              "bytes/token = 2 x layers x KV heads x head dim x bytes of the KV type\n"
              "(q8: 34 bytes and q4: 18 bytes a block of 32; q4ch keys: 4 bits and, per channel\n"
              "and block of B tokens, an fp16 scale and minimum: 24 bytes per 32 at B 16).\n\n"
              "Examples:\n"
              "  llm-kvstat --preset llama-2-7b --ctx 4096\n"
              "  llm-kvstat --preset llama-3-70b --kv-type fp8 --mem 80G --weights 70G --json\n"
              "  llm-kvstat model.llm --mem 24G --lengths-synthetic normal:800:400:1000\n"
              "  llm-kvstat --preset llama-3-8b --ctx 2048 --batch 32 --shared-prefix 1500 --mem 16G\n"
              "  llm-kvstat --trace trace.jsonl --plot trace.svg\n",
};

static int list_presets(void)
{
    char names[512];
    snprintf(names, sizeof names, "%s", llm_kvstat_presets());
    printf("%-15s %7s %6s %9s %9s %8s %12s  %s\n", "preset", "layers", "heads", "kv_heads", "head_dim",
           "ctx", "f16 B/token", "window");
    for (char *save, *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
        struct llm_kvstat_shape s;
        struct llm_kvstat_params p;
        struct llm_kvstat_report r;
        llm_kvstat_params_default(&p);
        if (llm_kvstat_preset(&s, n) || llm_kvstat_compute(&r, &s, &p, NULL, 0))
            return llm_cli_fail(&cli, LLM_E_INVALID);
        char win[48] = "-";
        if (s.window)
            snprintf(win, sizeof win, "%lld on %lld layers", (long long)s.window,
                     (long long)s.n_local);
        printf("%-15s %7lld %6lld %9lld %9lld %8lld %12llu  %s\n", n, (long long)s.n_layers,
               (long long)s.n_heads, (long long)s.n_kv_heads, (long long)s.head_dim,
               (long long)s.ctx_train, (unsigned long long)r.bytes_per_token, win);
    }
    return 0;
}

/* --trace: the summary of a KV trace, as a table with a chart or as JSON. */
static int trace_report(const char *path, const char *plot, int json)
{
    struct llm_trace tr;
    llm_status s = llm_trace_read(&tr, path);
    if (s)
        return llm_cli_fail(&cli, s);
    struct llm_trace_summary m;
    llm_trace_summarize(&tr, &m);
    if (json) {
        printf("{\"steps\":%lld,\"seconds\":%.6f,\"blocks\":%lld,\"block_size\":%lld,"
               "\"used_mean\":%.4f,\"used_peak\":%.4f,\"cached_mean\":%.4f,\"cache_only_mean\":%.4f,"
               "\"inside_block_waste\":%.4f,\"running_peak\":%lld,\"waiting_peak\":%lld,"
               "\"finished\":%lld,\"prefill_tokens\":%lld,\"decode_tokens\":%lld,"
               "\"prefix_lookup_tokens\":%lld,\"prefix_hit_tokens\":%lld,"
               "\"prefix_hit_rate\":%.4f,\"preemptions\":%lld}\n",
               (long long)m.steps, m.seconds, (long long)m.blocks, (long long)m.block_size,
               m.used_mean, m.used_peak, m.cached_mean, m.idle_mean, m.inside_waste, (long long)m.running_peak,
               (long long)m.waiting_peak, (long long)m.finished, (long long)m.prefill_tokens,
               (long long)m.decode_tokens, (long long)m.lookup_tokens, (long long)m.hit_tokens,
               m.hit_rate, (long long)m.preemptions);
    } else {
        printf("steps                 %lld in %.2f s\n", (long long)m.steps, m.seconds);
        printf("pool                  %lld blocks of %lld tokens\n", (long long)m.blocks,
               (long long)m.block_size);
        printf("blocks in use         %.1f%% mean, %.1f%% peak\n", 100 * m.used_mean,
               100 * m.used_peak);
        printf("prefix cache          lists %.1f%% of the pool (mean), %.1f%% held by it alone\n",
               100 * m.cached_mean, 100 * m.idle_mean);
        printf("waste inside blocks   %.1f%% of the sequences' block rows\n", 100 * m.inside_waste);
        printf("requests              %lld finished; at most %lld running, %lld waiting\n",
               (long long)m.finished, (long long)m.running_peak, (long long)m.waiting_peak);
        printf("tokens                %lld prefilled, %lld decoded\n", (long long)m.prefill_tokens,
               (long long)m.decode_tokens);
        printf("prefix hits           %.1f%% (%lld of %lld prompt tokens)\n", 100 * m.hit_rate,
               (long long)m.hit_tokens, (long long)m.lookup_tokens);
        printf("preemptions           %lld\n\nKV blocks over time ('#' held by sequences, ':' kept "
               "by the prefix cache alone):\n", (long long)m.preemptions);
        llm_trace_chart(stdout, &tr, 64, 10);
    }
    if (plot)
        s = llm_trace_svg(&tr, plot);
    llm_trace_free(&tr);
    if (!s && (fflush(stdout) || ferror(stdout)))
        s = llm_error_set(LLM_E_IO, "<stdout>: write error");
    return s ? llm_cli_fail(&cli, s) : 0;
}

static llm_status load_config(struct llm_kvstat_shape *s, const char *path)
{
    if (!llm_is_dir(path))
        return llm_kvstat_shape_load_config(s, path);
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s/config.json", path) >= sizeof buf)
        return llm_error_set(LLM_E_INVALID, "%s: path too long", path);
    return llm_kvstat_shape_load_config(s, buf);
}

int main(int argc, char **argv)
{
    struct llm_kvstat_params p;
    const char *preset = NULL, *config = NULL, *lengths = NULL, *synth = NULL, *arg;
    const char *trace = NULL, *plot = NULL;
    int json = 0, list = 0, have_seed = 0, r;
    int64_t v, seed = 1;
    llm_kvstat_params_default(&p);
    enum llm_kvstat_type kt[2] = { p.type, p.type }; /* K, V */
    llm_cli_init(&cli);
    while ((r = llm_cli_next(&cli, argc, argv, &arg)) != LLM_CLI_END) {
        llm_status s = LLM_OK;
        switch (r) {
        case LLM_CLI_EXIT0: return llm_cli_exit(&cli, 0);
        case LLM_CLI_ERROR: return 2;
        case OPT_PRESET: preset = arg; break;
        case OPT_CONFIG: config = arg; break;
        case OPT_KV_TYPE: /* q4ch: keys per channel, values per token (q4), as llm-run */
            s = llm_kvstat_type_parse(arg, &kt[0]);
            kt[1] = kt[0] == LLM_KVSTAT_Q4CH ? LLM_KVSTAT_Q4 : kt[0];
            break;
        case OPT_KV_TYPE_K: s = llm_kvstat_type_parse(arg, &kt[0]); break;
        case OPT_KV_TYPE_V: s = llm_kvstat_type_parse(arg, &kt[1]); break;
        case OPT_CTX: s = llm_parse_i64(arg, 1, INT64_C(1) << 40, "--ctx", &p.ctx); break;
        case OPT_BATCH: s = llm_parse_i64(arg, 1, INT64_C(1) << 32, "--batch", &p.batch); break;
        case OPT_BLOCK: s = llm_parse_i64(arg, 1, 1 << 20, "--block-size", &p.block_size); break;
        case OPT_STEP: s = llm_parse_i64(arg, 1, 1 << 20, "--step-tokens", &p.step); break;
        case OPT_SHARED:
            s = llm_parse_i64(arg, 1, INT64_C(1) << 40, "--shared-prefix", &p.shared_prefix);
            break;
        case OPT_MEM:
            s = llm_parse_size(arg, "--mem", &p.mem);
            if (!s && p.mem == 0)
                s = llm_error_set(LLM_E_INVALID, "--mem: must be more than 0");
            break;
        case OPT_WEIGHTS:
            s = llm_parse_size(arg, "--weights", &p.weights);
            if (!s && p.weights == UINT64_MAX)
                p.weights--;
            break;
        case OPT_LENGTHS: lengths = arg; break;
        case OPT_SYNTH: synth = arg; break;
        case OPT_SEED:
            s = llm_parse_i64(arg, 0, INT64_MAX, "--seed", &v);
            seed = v, have_seed = 1;
            break;
        case OPT_JSON: json = 1; break;
        case OPT_LIST: list = 1; break;
        case OPT_TRACE: trace = arg; break;
        case OPT_PLOT: plot = arg; break;
        }
        if (s)
            return llm_cli_usage(&cli, "%s", llm_error_detail(s));
    }
    p.type = kt[0];
    p.split_v = kt[1] != kt[0], p.type_v = kt[1];
    int n = argc - llm_cli_optind;
    if (list) {
        if (n || preset || config || json)
            return llm_cli_usage(&cli, "--list-presets takes no model and no other mode");
        return llm_cli_exit(&cli, list_presets());
    }
    if (plot && !trace)
        return llm_cli_usage(&cli, "--plot goes with --trace");
    if (trace) {
        if (n || preset || config || lengths || synth || have_seed || p.mem || p.ctx ||
            p.batch != 1 || p.shared_prefix || p.step != LLM_KVSTAT_STEP)
            return llm_cli_usage(&cli, "--trace takes no model and no other option but --plot and "
                                 "--json");
        return llm_cli_exit(&cli, trace_report(trace, plot, json));
    }
    if ((n > 0) + (preset != NULL) + (config != NULL) != 1 || n > 1)
        return llm_cli_usage(&cli, "give one of MODEL, --preset NAME or --config FILE");
    if (lengths && synth)
        return llm_cli_usage(&cli, "--lengths and --lengths-synthetic do not go together");
    if (have_seed && !synth)
        return llm_cli_usage(&cli, "--seed goes with --lengths-synthetic");
    if (p.weights != UINT64_MAX && !p.mem)
        return llm_cli_usage(&cli, "--weights goes with --mem");

    struct llm_kvstat_shape shape;
    llm_status s = preset ? llm_kvstat_preset(&shape, preset)
                 : config ? load_config(&shape, config)
                          : llm_kvstat_shape_load_model(&shape, argv[llm_cli_optind]);
    if (s == LLM_E_NOTFOUND && preset)
        return llm_cli_usage(&cli, "%s", llm_error_detail(s));
    if (s)
        return llm_cli_fail(&cli, s);
    int64_t ctx = p.ctx ? p.ctx : shape.ctx_train ? shape.ctx_train : 4096;
    uint64_t *len = NULL;
    size_t n_len = 0;
    if (lengths)
        s = llm_kvstat_lengths_load(&len, &n_len, lengths, (uint64_t)ctx);
    else if (synth && (s = llm_kvstat_lengths_synthetic(&len, &n_len, synth, (uint64_t)seed, (uint64_t)ctx)))
        return llm_cli_usage(&cli, "--lengths-synthetic: %s", llm_error_detail(s));
    struct llm_kvstat_report rep;
    if (!s)
        s = llm_kvstat_compute(&rep, &shape, &p, len, n_len);
    if (!s)
        s = json ? llm_kvstat_print_json(stdout, &rep) : llm_kvstat_print_table(stdout, &rep);
    llm_free(len);
    return llm_cli_exit(&cli, s ? llm_cli_fail(&cli, s) : 0);
}

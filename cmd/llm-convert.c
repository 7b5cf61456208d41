/* llm-convert: import a model into the .llm format, export it to GGUF,
 * inspect and verify files, make synthetic models. */
#include <stdlib.h>
#include <string.h>

#include "../lib/llm.h"

enum { OPT_TO = 256, OPT_JSON, OPT_SUMS, OPT_VERIFY, OPT_SYNTH, OPT_SEED, OPT_META, OPT_TOKENIZER,
       OPT_COMPRESS, OPT_INFO, OPT_DEQUANT };

static const struct llm_opt opts[] = {
    { 'o', "output", LLM_ARG_REQUIRED, "FILE", "write the converted model to FILE ('-' = stdout)", "file" },
    { 't', "type", LLM_ARG_REQUIRED, "TYPE", "convert every weight matrix to TYPE (default: keep; K-quants become f16)",
      "f32 f16 bf16 q8_0 q8_g64 q8_g128 q8_ch q8z_g32 q8z_g64 q8z_g128 q8z_ch q4_0 q4_g64 q4_g128 q4_ch q4_1 q4z_g64 q4z_g128 q4z_ch nf4 nf4_dq fp8_e4m3 q3z_g32 q3z_g64 q3z_g128 q3z_ch" },
    { OPT_TO, "to", LLM_ARG_REQUIRED, "FORMAT", "output format: llm, gguf; gptq, gptq_v2, awq write a HF directory (default: from the file name, else llm)", "llm gguf gptq gptq_v2 awq" },
    { OPT_DEQUANT, "dequant", LLM_ARG_NONE, NULL, "with --to gptq/gptq_v2/awq: write what cannot stay quantized as f16", NULL },
    { OPT_COMPRESS, "compress", LLM_ARG_OPTIONAL, "LEVEL", "zstd-compress each tensor (.llm; default level 3)", NULL },
    { OPT_TOKENIZER, "tokenizer", LLM_ARG_REQUIRED, "FILE", "llama2.c tokenizer.bin for a llama2.c checkpoint or a --synthetic model", "file" },
    { OPT_META, "meta", LLM_ARG_REQUIRED, "KEY=VALUE", "set user.KEY in the metadata (repeatable)", NULL },
    { OPT_INFO, "info", LLM_ARG_NONE, NULL, "print metadata, tensors and totals of each FILE", NULL },
    { OPT_JSON, "json", LLM_ARG_NONE, NULL, "with --info: print JSON instead of YAML", NULL },
    { OPT_SUMS, "checksums", LLM_ARG_NONE, NULL, "with --info: print each tensor's XXH3-64 (reads all data)", NULL },
    { OPT_VERIFY, "verify", LLM_ARG_NONE, NULL, "check every checksum of each .llm FILE", NULL },
    { OPT_SYNTH, "synthetic", LLM_ARG_REQUIRED, "SHAPE", "make a random-weight model of SHAPE (a name or a YAML file)",
      "stories260k stories15m stories110m smollm2-135m llama-2-7b llama-3-8b mistral-7b qwen2-0.5b qwen3-0.6b mistral-7b-v0.1 gemma2-2b gemma3-270m phi-3-mini-4k mixtral-8x7b qwen1.5-moe-a2.7b qwen3-30b-a3b" },
    { OPT_SEED, "seed", LLM_ARG_REQUIRED, "N", "seed for --synthetic (default: 1)", NULL },
};

static struct llm_cli cli = {
    .prog = "llm-convert",
    .synopsis = "[OPTIONS] IN -o OUT\n"
                "--info [--json] [--checksums] FILE...\n"
                "--verify FILE...\n"
                "--synthetic SHAPE [--type TYPE] [--seed N] [--tokenizer FILE] -o OUT\n"
                "IN --to gptq|gptq_v2|awq [--dequant] -o DIR",
    .summary = "Convert GGUF, llama2.c and Hugging Face models (float, GPTQ, AWQ) to .llm, and\n"
               ".llm to GGUF or to GPTQ/AWQ directories; inspect, verify and make synthetic models.",
    .opts = opts,
    .n_opts = sizeof opts / sizeof opts[0],
    .footer = "IN is a .llm or GGUF file, a llama2.c checkpoint, a Hugging Face model directory\n"
              "or '-' (standard input). Types: f32 f16 bf16 q8_0 q8_g64 q8_g128 q8_ch q8z_g32 ...\n"
              "(see llm-format(5)).\n\n"
              "Examples:\n"
              "  llm-convert stories260K.bin --tokenizer tok512.bin -o stories.llm\n"
              "  llm-convert model.gguf -o - | llm-convert --info -\n"
              "  llm-convert stories.llm -o stories.gguf\n"
              "  llm-convert --synthetic llama-2-7b --type q4_0 -o 7b.llm\n"
              "  llm-convert model-gptq.llm --to gptq -o model-gptq/\n",
};

struct args {
    const char *out, *to, *synth, *tokenizer;
    enum llm_type type;
    int have_type, compress, info, json, sums, verify, dequant;
    uint64_t seed;
    int have_seed;
    const char *meta[64];
    int n_meta;
};

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static llm_status set_user_meta(struct llm_file *f, const struct args *a)
{
    for (int i = 0; i < a->n_meta; i++) {
        const char *eq = strchr(a->meta[i], '=');
        char key[256];
        snprintf(key, sizeof key, "user.%.*s", (int)(eq - a->meta[i]), a->meta[i]);
        LLM_TRY(llm_meta_set_str(f->meta, key, eq + 1));
    }
    return LLM_OK;
}

/* --tokenizer names the separate vocabulary of a llama2.c checkpoint; any
 * other input carries its own, so the option would be ignored: refuse it. */
static llm_status check_tokenizer_opt(const struct args *a, struct llm_file *f)
{
    if (a->tokenizer && !strcmp(f->format, "synthetic"))
        return llm_llama2c_tokenizer_open(f, a->tokenizer);
    if (a->tokenizer && strcmp(f->format, "llama2c") != 0)
        return llm_error_set(LLM_E_INVALID, "%s: --tokenizer applies to llama2.c checkpoints and "
                             "synthetic models, not to %s files", f->path, f->format);
    return LLM_OK;
}

/* --to gptq|gptq_v2|awq: 0 for the single-file formats */
static int hf_method(const char *to)
{
    if (!to)
        return 0;
    if (!strcmp(to, "gptq") || !strcmp(to, "gptq_v2"))
        return LLM_HFQ_GPTQ;
    return strcmp(to, "awq") == 0 ? LLM_HFQ_AWQ : 0;
}

/* NaN or infinite weights are copied as they are, with a warning: a
 * conversion keeps what the model holds (unless -q). */
static void warn_nonfinite(const struct llm_file *f)
{
    if (f->n_nonfinite && cli.verbose >= 0)
        fprintf(stderr, "%s: warning: %s: %llu NaN or infinite weight value%s in %zu tensor%s "
                "(the first: '%s'); the model's output will be meaningless\n", cli.prog, f->path,
                (unsigned long long)f->n_nonfinite, f->n_nonfinite == 1 ? "" : "s",
                f->n_nonfinite_tensors, f->n_nonfinite_tensors == 1 ? "" : "s",
                f->nonfinite_first);
}

static int do_convert(const struct args *a, const char *in)
{
    struct llm_file *f = NULL;
    struct llm_import_opts io;
    llm_import_opts_default(&io);
    io.tokenizer_path = a->tokenizer;
    io.nonfinite = LLM_FINITE_COUNT;
    if (a->have_type)
        io.dequant_type = a->type;
    llm_status s = a->synth ? llm_synthetic(&f, a->synth, a->have_type ? a->type : LLM_TYPE_F32, a->seed)
                            : llm_import(&f, in, &io);
    if (!s)
        s = check_tokenizer_opt(a, f);
    /* Each tensor's checksum is checked before its bytes are written. On
     * standard output or into a directory of several files a damaged tensor
     * found half-way would leave part of the output: check them all first. */
    if (!s && !strcmp(f->format, "llm") && (!strcmp(a->out, "-") || hf_method(a->to)))
        s = llm_llm_verify(f, NULL);
    if (s) {
        llm_file_free(f);
        return llm_cli_fail(&cli, s);
    }
    struct llm_write_opts wo;
    llm_write_opts_default(&wo);
    wo.compress_level = a->compress;
    wo.convert = a->have_type && !a->synth;
    wo.type = a->type;
    int gguf = a->to ? strcmp(a->to, "gguf") == 0 : ends_with(a->out, ".gguf");
    struct llm_hfq_write_opts ho;
    llm_hfq_write_opts_default(&ho);
    ho.method = hf_method(a->to);
    ho.gptq_v2 = a->to && strcmp(a->to, "gptq_v2") == 0;
    ho.dequant = a->dequant;
    if (!(s = set_user_meta(f, a)) && ho.method && wo.convert)
        s = llm_file_convert(f, wo.type);
    if (!s)
        s = ho.method ? llm_hfq_write(f, a->out, &ho)
            : gguf    ? llm_gguf_write(f, a->out, &wo)
                      : llm_llm_write(f, a->out, &wo);
    if (!s)
        warn_nonfinite(f);
    if (!s && cli.verbose > 0) {
        uint64_t params, bytes;
        llm_file_totals(f, &params, &bytes);
        fprintf(stderr, "%s: wrote %s: %zu tensors, %llu parameters\n", cli.prog, a->out,
                f->n_tensors, (unsigned long long)params);
    }
    llm_file_free(f);
    return s ? llm_cli_fail(&cli, s) : 0;
}

static int do_info(const struct args *a, char **files, int n)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        struct llm_file *f;
        struct llm_import_opts io;
        llm_import_opts_default(&io);
        io.tokenizer_path = a->tokenizer;
        io.nonfinite = LLM_FINITE_IGNORE; /* --info prints what is there */
        llm_status s = llm_import(&f, files[i], &io);
        if (!s && (s = check_tokenizer_opt(a, f)))
            llm_file_free(f);
        if (!s) {
            if (i)
                fputs(a->json ? "\n" : "---\n", stdout);
            s = llm_info_print(stdout, f, a->json, a->sums);
            llm_file_free(f);
        }
        if (s)
            rc = llm_cli_fail(&cli, s);
    }
    return rc;
}

static int do_verify(char **files, int n)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        struct llm_file *f;
        size_t checked = 0;
        struct llm_import_opts io;
        llm_import_opts_default(&io);
        io.nonfinite = LLM_FINITE_COUNT;
        llm_status s = llm_llm_open(&f, files[i], &io);
        if (!s) {
            s = llm_llm_verify(f, &checked);
            if (!s)
                warn_nonfinite(f);
            llm_file_free(f);
        }
        if (s)
            rc = llm_cli_fail(&cli, s);
        else
            printf("%s: OK (%zu tensors)\n", strcmp(files[i], "-") ? files[i] : "<stdin>", checked);
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct args a = { .seed = 1 };
    const char *arg;
    int r;
    int64_t v;
    llm_cli_init(&cli);
    while ((r = llm_cli_next(&cli, argc, argv, &arg)) != LLM_CLI_END) {
        switch (r) {
        case LLM_CLI_EXIT0: return llm_cli_exit(&cli, 0);
        case LLM_CLI_ERROR: return 2;
        case 'o': a.out = arg; break;
        case 't':
            if (llm_type_parse(arg, &a.type))
                return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
            a.have_type = 1;
            break;
        case OPT_TO:
            if (strcmp(arg, "llm") && strcmp(arg, "gguf") && !hf_method(arg))
                return llm_cli_usage(&cli, "--to: unknown format '%s' (llm, gguf, gptq, gptq_v2, awq)", arg);
            a.to = arg;
            break;
        case OPT_COMPRESS:
            a.compress = 3;
            if (arg && llm_parse_i64(arg, 1, 22, "--compress", &v))
                return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
            if (arg)
                a.compress = (int)v;
            break;
        case OPT_TOKENIZER: a.tokenizer = arg; break;
        case OPT_META:
            if (!strchr(arg, '=') || arg[0] == '=' || strchr(arg, '=') - arg > 200)
                return llm_cli_usage(&cli, "--meta: expected KEY=VALUE with a key of 1..200 bytes, got '%s'", arg);
            if (a.n_meta == 64)
                return llm_cli_usage(&cli, "--meta: at most 64 keys");
            a.meta[a.n_meta++] = arg;
            break;
        case OPT_INFO: a.info = 1; break;
        case OPT_DEQUANT: a.dequant = 1; break;
        case OPT_JSON: a.json = 1; break;
        case OPT_SUMS: a.sums = 1; break;
        case OPT_VERIFY: a.verify = 1; break;
        case OPT_SYNTH: a.synth = arg; break;
        case OPT_SEED:
            if (llm_parse_i64(arg, 0, INT64_MAX, "--seed", &v))
                return llm_cli_usage(&cli, "%s", llm_error_detail(LLM_E_INVALID));
            a.seed = (uint64_t)v;
            a.have_seed = 1;
            break;
        }
    }
    char **files = argv + llm_cli_optind;
    int n = argc - llm_cli_optind;
    if (a.info + a.verify + (a.synth != NULL) > 1)
        return llm_cli_usage(&cli, "--info, --verify and --synthetic are separate modes");
    if (a.have_seed && !a.synth)
        return llm_cli_usage(&cli, "--seed goes with --synthetic");
    if ((a.info || a.verify) && (a.n_meta || a.have_type || a.compress || a.to || a.dequant))
        return llm_cli_usage(&cli, "--meta, --type, --compress, --to and --dequant make no sense with %s",
                             a.info ? "--info" : "--verify");
    if (a.tokenizer && a.verify)
        return llm_cli_usage(&cli, "--tokenizer goes with a llama2.c checkpoint or --synthetic");
    if ((a.json || a.sums) && !a.info)
        return llm_cli_usage(&cli, "%s goes with --info", a.json ? "--json" : "--checksums");
    if (a.info || a.verify) {
        if (n < 1)
            return llm_cli_usage(&cli, "%s needs at least one FILE", a.info ? "--info" : "--verify");
        if (a.out)
            return llm_cli_usage(&cli, "-o does not go with %s", a.info ? "--info" : "--verify");
        return llm_cli_exit(&cli, a.info ? do_info(&a, files, n) : do_verify(files, n));
    }
    if (!a.out)
        return llm_cli_usage(&cli, "no output file (-o FILE, or -o - for stdout)");
    if (a.synth ? n != 0 : n != 1)
        return llm_cli_usage(&cli, a.synth ? "--synthetic takes no input file" : "expected one input");
    int gguf = a.to ? strcmp(a.to, "gguf") == 0 : ends_with(a.out, ".gguf");
    if ((gguf || hf_method(a.to)) && a.compress)
        return llm_cli_usage(&cli, "--compress applies to .llm output only");
    if (a.dequant && !hf_method(a.to))
        return llm_cli_usage(&cli, "--dequant goes with --to gptq, gptq_v2 or awq");
    if (hf_method(a.to) && strcmp(a.out, "-") == 0)
        return llm_cli_usage(&cli, "--to %s writes a directory: -o DIR, not '-'", a.to);
    return llm_cli_exit(&cli, do_convert(&a, a.synth ? NULL : files[0]));
}

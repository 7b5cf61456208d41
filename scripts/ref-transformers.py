#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for the architecture tests.

For each shape tests/unit/model/ref/NAME.yaml this script
  1. makes the random-weight model with our own generator
     (llm-convert --synthetic NAME.yaml -o NAME.gguf, f32, seed 7),
  2. multiplies every weight matrix by 12, as the unit test does, so that
     attention is sharp and the logits spread (0.02-std weights make every
     model nearly linear and every greedy choice a near tie),
  3. loads those weights into the transformers model class of the
     architecture (names mapped, Q/K rows of "norm" RoPE models put back in
     Hugging Face's half-split order), eager attention, float32,
  4. writes NAME.txt: the prompt, the greedy continuation and the logits of
     every prompt position, which tests/unit/model/test_arch.c checks.

The unit test rebuilds the same model without Python (the generator is
deterministic), so CI needs neither torch nor transformers. Run this by
hand, in a venv that has them (pip install torch transformers gguf), after
changing a shape or the generator:

    python scripts/ref-transformers.py [--bin bin] [NAME ...]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from gguf import GGUFReader

REF = os.path.join(os.path.dirname(__file__), "..", "tests", "unit", "model", "ref")
SEED = 7
SCALE = 12.0
N_PROMPT = 24
N_GEN = 8


def prompt(vocab):
    return [(i * 37 + 11) % vocab for i in range(N_PROMPT)]


def read_gguf(path):
    r = GGUFReader(path)
    meta = {}
    for f in r.fields.values():
        if f.types and f.types[0] != f.types[-1]:
            continue
        v = f.parts[f.data[0]] if f.data else None
        if v is not None and len(v) == 1:
            meta[f.name] = v[0].item()
        elif v is not None:
            meta[f.name] = bytes(v).decode("utf-8", "replace")
    tensors = {}
    for t in r.tensors:
        a = np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        tensors[t.name] = a
    return meta, tensors


def unpermute(w, heads):
    """GGUF "norm" order (pairs 2i, 2i+1) back to HF's halves (i, i+half)."""
    rows = w.shape[0]
    hd = rows // heads
    return w.reshape(heads, hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(rows, -1)


def hf_model(meta, tensors):
    arch = meta["general.architecture"]
    a = arch
    cfg = dict(
        vocab_size=meta[f"{a}.vocab_size"] if f"{a}.vocab_size" in meta else tensors["token_embd.weight"].shape[0],
        hidden_size=meta[f"{a}.embedding_length"],
        intermediate_size=meta[f"{a}.feed_forward_length"],
        num_hidden_layers=meta[f"{a}.block_count"],
        num_attention_heads=meta[f"{a}.attention.head_count"],
        num_key_value_heads=meta[f"{a}.attention.head_count_kv"],
        max_position_embeddings=meta[f"{a}.context_length"],
        rms_norm_eps=meta[f"{a}.attention.layer_norm_rms_epsilon"],
        rope_theta=meta[f"{a}.rope.freq_base"],
        tie_word_embeddings="output.weight" not in tensors,
    )
    cfg["head_dim"] = meta.get(f"{a}.attention.key_length", cfg["hidden_size"] // cfg["num_attention_heads"])
    swa = meta.get(f"{a}.attention.sliding_window", 0)
    permute = arch == "llama"
    norm_shift = 0.0
    experts = meta.get(f"{a}.expert_count", 0)
    moe = dict(num_experts_per_tok=meta.get(f"{a}.expert_used_count", 0))
    if arch == "llama" and experts:  # and Mixtral too: the experts say which
        conf = transformers.MixtralConfig(sliding_window=swa or None, num_local_experts=experts,
                                          **moe, **cfg)
        cls = transformers.MixtralForCausalLM
    elif arch == "llama":  # GGUF calls Mistral "llama"; the window says which
        conf = transformers.MistralConfig(sliding_window=swa or None, **cfg)
        cls = transformers.MistralForCausalLM
    elif arch == "qwen2moe":
        conf = transformers.Qwen2MoeConfig(
            use_sliding_window=False, num_experts=experts, norm_topk_prob=False,
            moe_intermediate_size=meta[f"{a}.expert_feed_forward_length"],
            shared_expert_intermediate_size=meta[f"{a}.expert_shared_feed_forward_length"],
            decoder_sparse_step=1, qkv_bias=True, **moe, **cfg)
        cls = transformers.Qwen2MoeForCausalLM
    elif arch == "qwen3moe":
        conf = transformers.Qwen3MoeConfig(
            use_sliding_window=False, num_experts=experts, norm_topk_prob=True,
            moe_intermediate_size=meta[f"{a}.expert_feed_forward_length"],
            decoder_sparse_step=1, attention_bias=False, **moe, **cfg)
        cls = transformers.Qwen3MoeForCausalLM
    elif arch == "qwen3":
        conf = transformers.Qwen3Config(use_sliding_window=False, attention_bias=False, **cfg)
        cls = transformers.Qwen3ForCausalLM
    elif arch == "gemma3":
        pattern = meta.get(f"{a}.attention.sliding_window_pattern", 6)
        rope = {"full_attention": {"rope_type": "default", "rope_theta": cfg.pop("rope_theta")},
                "sliding_attention": {"rope_type": "default",
                                      "rope_theta": meta.get(f"{a}.rope.freq_base_swa", 10000.0)}}
        conf = transformers.Gemma3TextConfig(
            sliding_window=swa, sliding_window_pattern=pattern, rope_parameters=rope,
            query_pre_attn_scalar=cfg["head_dim"], hidden_activation="gelu_pytorch_tanh",
            final_logit_softcapping=None, attn_logit_softcapping=None, **cfg)
        cls = transformers.Gemma3ForCausalLM
        norm_shift = 1.0  # GGUF's Gemma norms hold 1 + the HF weight
    elif arch == "gemma2":
        conf = transformers.Gemma2Config(
            sliding_window=swa, query_pre_attn_scalar=cfg["head_dim"],
            hidden_activation="gelu_pytorch_tanh",
            attn_logit_softcapping=meta.get(f"{a}.attn_logit_softcapping"),
            final_logit_softcapping=meta.get(f"{a}.final_logit_softcapping"), **cfg)
        cls = transformers.Gemma2ForCausalLM
        norm_shift = 1.0
    elif arch == "phi3":
        orig = cfg["max_position_embeddings"]
        extra = {}
        if "rope_factors_long.weight" in tensors:  # LongRoPE
            orig = meta[f"{a}.rope.scaling.original_context_length"]
            extra["rope_scaling"] = {
                "rope_type": "longrope", "rope_theta": cfg["rope_theta"],
                "long_factor": tensors.pop("rope_factors_long.weight").tolist(),
                "short_factor": tensors.pop("rope_factors_short.weight").tolist()}
        conf = transformers.Phi3Config(sliding_window=swa or None, pad_token_id=0,
                                       original_max_position_embeddings=orig, **extra,
                                       **{k: v for k, v in cfg.items() if k != "head_dim"})
        cls = transformers.Phi3ForCausalLM
    elif arch == "qwen2":
        conf = transformers.Qwen2Config(use_sliding_window=False, **cfg)
        cls = transformers.Qwen2ForCausalLM
    else:
        sys.exit(f"ref-transformers: architecture {arch} has no mapping here")
    conf._attn_implementation = "eager"
    names = {
        "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
        "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
        "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    }
    if experts:
        names.update({"ffn_gate_inp": "mlp.gate", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
                      "ffn_up_shexp": "mlp.shared_expert.up_proj",
                      "ffn_down_shexp": "mlp.shared_expert.down_proj",
                      "ffn_gate_inp_shexp": "mlp.shared_expert_gate"})
    if arch == "phi3":  # fused in its GGUF as in its HF checkpoints
        names.update({"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"})
    if arch.startswith("gemma"):
        names.update({"ffn_norm": "pre_feedforward_layernorm",
                      "post_attention_norm": "post_attention_layernorm",
                      "post_ffw_norm": "post_feedforward_layernorm"})
    sd = {}
    for name, w in list(tensors.items()):
        if name.endswith("_exps.weight"):  # (E, rows, cols): HF v5's fused experts
            w = w * np.float32(SCALE)
            layer = name.split(".")[1]
            if "ffn_down" in name:
                sd[f"model.layers.{layer}.mlp.experts.down_proj"] = w
            elif "ffn_gate" in name:
                up = tensors[f"blk.{layer}.ffn_up_exps.weight"] * np.float32(SCALE)
                sd[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = np.concatenate([w, up], 1)
            continue
        if name == "ffn_gate_inp_shexp" or name.endswith("ffn_gate_inp_shexp.weight"):
            w = w.reshape(1, -1)  # one row: a Linear(hidden, 1); a vector, so not scaled
            _, layer, base, kind = name.split(".")
            sd[f"model.layers.{layer}.{names[base]}.{kind}"] = w
            continue
        if w.ndim == 2:
            w = w * np.float32(SCALE)  # as the unit test's scale_weights, in float32
        elif name.endswith("norm.weight"):
            w = w - np.float32(norm_shift)  # exact: the weights lie in [0.5, 1.5)
        if name == "token_embd.weight":
            sd["model.embed_tokens.weight"] = w
            continue
        if name == "output_norm.weight":
            sd["model.norm.weight"] = w
            continue
        if name == "output.weight":
            sd["lm_head.weight"] = w
            continue
        _, layer, base, kind = name.split(".")
        if permute and base in ("attn_q", "attn_k"):
            w = unpermute(w, cfg["num_attention_heads"] if base == "attn_q" else cfg["num_key_value_heads"])
        sd[f"model.layers.{layer}.{names[base]}.{kind}"] = w
    if cfg["tie_word_embeddings"]:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model = cls(conf).to(torch.float32).eval()
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        sys.exit(f"ref-transformers: missing {missing}, unexpected {unexpected}")
    return model, cfg["vocab_size"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "bin"))
    ap.add_argument("--save", metavar="DIR",
                    help="also save each model as a Hugging Face directory DIR/NAME (to check "
                         "llm-convert's import of real configs by hand)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    names = args.names or sorted(f[:-5] for f in os.listdir(REF) if f.endswith(".yaml"))
    torch.manual_seed(0)
    for name in names:
        yaml = os.path.join(REF, name + ".yaml")
        with tempfile.TemporaryDirectory() as tmp:
            g = os.path.join(tmp, name + ".gguf")
            subprocess.run([os.path.join(args.bin, "llm-convert"), "--synthetic", yaml,
                            "--seed", str(SEED), "-o", g, "-q"], check=True)
            meta, tensors = read_gguf(g)
        model, vocab = hf_model(meta, tensors)
        if args.save:
            model.save_pretrained(os.path.join(args.save, name))
        ids = prompt(vocab)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].numpy()
            out = model.generate(torch.tensor([ids]), max_new_tokens=N_GEN, do_sample=False,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        gen = out[0, len(ids):].tolist()
        top2 = np.sort(logits, axis=1)[:, -2:]
        with open(os.path.join(REF, name + ".txt"), "w") as f:
            f.write(f"# scripts/ref-transformers.py: transformers {transformers.__version__}, "
                    f"torch {torch.__version__}, {name}.yaml, seed {SEED}, weights x{SCALE:g}\n")
            f.write(f"# smallest top-1 margin over the prompt: {float((top2[:, 1] - top2[:, 0]).min()):.4g}\n")
            f.write("prompt " + " ".join(map(str, ids)) + "\n")
            f.write("greedy " + " ".join(map(str, gen)) + "\n")
            for row in logits:
                f.write(" ".join(f"{x:.7g}" for x in row) + "\n")
        print(f"{name}: greedy {gen}")


if __name__ == "__main__":
    main()

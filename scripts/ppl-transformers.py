#!/usr/bin/env python3
"""Perplexity of a GGUF model in Hugging Face transformers, by llm-bench's
protocol (llama-perplexity's): the token ids of the text (with BOS, from our
tokenizer, so both programs score the same tokens) cut into windows of CTX,
each window's first token replaced by BOS, the second half of each window
scored. For comparing `llm-bench --ppl` with transformers on the same file:

    llm-run -m model.gguf --tokenize -f wiki.test.raw > ids.txt
    python scripts/ppl-transformers.py model.gguf ids.txt [--ctx 512] [--chunks 20]

Needs torch, transformers, gguf and accelerate (a venv outside the
repository); transformers dequantizes the GGUF's tensors to float32.
"""
import argparse
import math
import os

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("ids")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ids = [int(x) for x in open(a.ids).read().split()]
    bos = ids[0]
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)),
                                                 gguf_file=os.path.basename(a.gguf),
                                                 dtype=torch.float32).eval()
    n = len(ids) // a.ctx
    if a.chunks:
        n = min(n, a.chunks)
    nll, count = 0.0, 0
    for ch in range(n):
        win = ids[ch * a.ctx:(ch + 1) * a.ctx]
        win[0] = bos
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([win])).logits[0].double(), -1)
        for j in range(a.ctx // 2, a.ctx - 1):
            nll -= lp[j, ids[ch * a.ctx + j + 1]].item()
            count += 1
    print(f"{a.gguf}: {n} windows of {a.ctx}, {count} tokens scored, PPL = {math.exp(nll / count):.4f}")


if __name__ == "__main__":
    main()

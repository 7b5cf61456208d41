#!/usr/bin/env python3
"""make-batch.py: an OpenAI batch JSONL file of completion requests cut from
a text file, for llm-run --batch tests and benchmarks.

    scripts/make-batch.py TEXT -n 256 --prompt-words 24:384 --max-tokens 16:256 \
        [--shared-prefix-words 300] [--seed 1] [--temperature 0] [--chat] > requests.jsonl

Prompt i is a run of words taken at a random place of TEXT (lengths uniform
in the range; about 1.3 tokens a word for English and a Llama or SmolLM2
vocabulary); max_tokens is uniform in its range. A shared prefix (the same
first words of TEXT) goes before every prompt, as a system prompt would.
The file is a function of the arguments: the same seed gives the same file.
"""
import argparse
import json
import random
import sys


def span(s):
    a, _, b = s.partition(":")
    a = int(a)
    b = int(b) if b else a
    if a < 1 or b < a:
        raise argparse.ArgumentTypeError(f"bad range {s!r} (want A or A:B, 1 <= A <= B)")
    return a, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("text")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--prompt-words", type=span, default=(24, 384))
    ap.add_argument("--max-tokens", type=span, default=(16, 256))
    ap.add_argument("--shared-prefix-words", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--chat", action="store_true", help="chat requests (the prompt as a user message)")
    a = ap.parse_args()
    words = open(a.text, encoding="utf-8", errors="replace").read().split()
    if len(words) < a.prompt_words[1] + a.shared_prefix_words + 1:
        sys.exit(f"make-batch.py: {a.text}: too few words ({len(words)})")
    rng = random.Random(a.seed)
    prefix = " ".join(words[: a.shared_prefix_words])
    for i in range(a.n):
        k = rng.randint(*a.prompt_words)
        at = rng.randrange(a.shared_prefix_words, len(words) - k)
        text = " ".join(words[at : at + k])
        body = {"max_tokens": rng.randint(*a.max_tokens), "temperature": a.temperature}
        if a.chat:
            msgs = [{"role": "user", "content": text}]
            if prefix:
                msgs.insert(0, {"role": "system", "content": prefix})
            body["messages"] = msgs
            url = "/v1/chat/completions"
        else:
            body["prompt"] = (prefix + "\n\n" if prefix else "") + text
            url = "/v1/completions"
        print(json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url, "body": body}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the golden files that tests compare tpserve against, computed by llama.cpp.

  tokenizer: tests/golden/tokenizer_corpus.json (list of strings)
             -> tests/golden/tokenizer_ids.json ([{"text", "ids"}])
  logits:    tests/golden/logit_prompts.json (list of strings, special tokens allowed)
             -> tests/golden/logits_top20.json ([{"prompt", "ids", "top": [[[id, logit] x20] per position]}])

A developer tool (pip install -r scripts/requirements-golden.txt); tests only read its output.
"""
import argparse
import json
import os
import sys

import numpy as np
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
TOP_K = 20


def load(path):
    with open(os.path.join(GOLDEN, path), encoding="utf-8") as f:
        return json.load(f)


def save(path, value):
    with open(os.path.join(GOLDEN, path), "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


def tokenizer_golden(llm):
    corpus = load("tokenizer_corpus.json")
    out = []
    for text in corpus:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        out.append({"text": text, "ids": ids})
    save("tokenizer_ids.json", out)


def logits_golden(llm):
    prompts = load("logit_prompts.json")
    out = []
    for i, prompt in enumerate(prompts):
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
        top = []
        for row in logits:
            order = np.argsort(-row, kind="stable")[:TOP_K]
            top.append([[int(t), round(float(row[t]), 5)] for t in order])
        out.append({"prompt": prompt, "ids": ids, "top": top})
        print(f"prompt {i + 1}/{len(prompts)}: {len(ids)} positions", file=sys.stderr)
    save("logits_top20.json", out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["tokenizer", "logits", "all"])
    parser.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    llm = Llama(model_path=args.model, n_ctx=2048, n_batch=512, logits_all=True,
                n_threads=args.threads, verbose=False)
    if args.what in ("tokenizer", "all"):
        tokenizer_golden(llm)
    if args.what in ("logits", "all"):
        logits_golden(llm)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Prefill and decode tokens/s of llama.cpp (llama-cpp-python) on one prompt, greedy, EOS ignored.

Measures the same thing tpserve-generate prints, so bench/compare_generate.sh can put them side
by side: prefill = one eval of the whole prompt; decode = each later token's eval.
"""
import argparse
import time

from llama_cpp import Llama


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True, help="text after the chat template is applied")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    llm = Llama(model_path=args.model, n_ctx=2048, n_batch=512, n_threads=args.threads,
                n_threads_batch=args.threads, verbose=False)
    ids = llm.tokenize(args.prompt.encode("utf-8"), add_bos=False, special=True)
    start = time.perf_counter()
    llm.eval(ids)
    prefill = time.perf_counter() - start
    token = int(llm.scores[llm.n_tokens - 1].argmax())
    start = time.perf_counter()
    steps = 0
    while steps < args.max_tokens - 1:
        llm.eval([token])
        token = int(llm.scores[llm.n_tokens - 1].argmax())
        steps += 1
    decode = time.perf_counter() - start
    print(f"prefill: {len(ids)} tokens in {prefill:.3f} s ({len(ids) / prefill:.1f} tokens/s)")
    print(f"decode: {steps} tokens in {decode:.3f} s ({steps / decode if steps else 0:.1f} tokens/s)")


if __name__ == "__main__":
    main()

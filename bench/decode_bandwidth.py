#!/usr/bin/env python3
"""Batch-1 decode against the machine's read bandwidth: how close each engine comes to the bound.

A decode step at one sequence reads every weight once, so tokens/s × weight bytes can reach at
most the memory's read bandwidth. Each round measures, one after the other on the same machine:
the bandwidth (tpserve-bench-bandwidth, best of its passes over 1 GiB with every core), tpserve's
decode (tpserve-generate, one sequence, greedy, EOS ignored, default flags) and llama.cpp's
(llama-bench tg, built for this CPU by bench/compare_llama_server.py), and gives each engine's
weight bytes per token × tokens/s as a fraction of the bandwidth, then the median fraction of
each: on a shared machine the bound itself moves by a third between rounds. The KV cache's reads
(under 1% of the weights' at these lengths) are left out, which only lowers the fractions.

    bench/decode_bandwidth.py [--model M] [--rounds 5] [--tokens 128] [--threads N]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

from compare_llama_server import ROOT, llama_cpp_native

DEFAULT_MODEL = os.path.join(ROOT, "build", "bench-models", "llama-3.2-1b-shape.Q4_K_M.gguf")
PROMPT = "Write a careful, detailed and friendly explanation of how rivers form."


def bandwidth(threads):
    out = subprocess.run([os.path.join(ROOT, "build", "bin", "tpserve-bench-bandwidth"),
                          "--threads", str(threads)], check=True, capture_output=True,
                         text=True).stdout
    return float(re.search(r"best ([\d.]+) GB/s", out).group(1))


def tpserve_decode(model, tokens, threads):
    """(tokens/s, resident weight bytes) of one sequence's decode."""
    run = subprocess.run([os.path.join(ROOT, "build", "bin", "tpserve-generate"), "--model", model,
                          "--prompt", PROMPT, "--max-tokens", str(tokens), "--temperature", "0",
                          "--ignore-eos", "--threads", str(threads)],
                         check=True, capture_output=True, text=True)
    rate = float(re.search(r"^decode: .*\(([\d.]+) tokens/s\)", run.stderr, re.M).group(1))
    mib = float(re.search(r"weights ([\d.]+) MiB", run.stderr).group(1))
    return rate, mib * 2**20


def llama_decode(model, tokens, threads):
    """llama-bench's tg tokens/s."""
    out = subprocess.run([llama_cpp_native("llama-bench"), "-m", model, "-t", str(threads),
                          "-p", "0", "-n", str(tokens), "-r", "2"], check=True,
                         capture_output=True, text=True).stdout
    row = next(l for l in out.splitlines() if re.search(rf"\btg{tokens}\b", l))
    return float(re.search(r"([\d.]+) ± [\d.]+ \|\s*$", row).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    weight_bytes = os.path.getsize(args.model)
    print(f"{os.path.basename(args.model)}: {weight_bytes / 1e6:.0f} MB file; {args.threads} "
          f"threads, {args.tokens} tokens decoded")
    print()
    print("| round | read bandwidth GB/s | tpserve tok/s | tpserve GB/s (fraction) | "
          "llama.cpp tok/s | llama.cpp GB/s (fraction) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    fractions = {"tpserve": [], "llama.cpp": []}
    for r in range(1, args.rounds + 1):
        print(f"decode_bandwidth: round {r}/{args.rounds}", file=sys.stderr)
        bound = bandwidth(args.threads)
        tp_rate, tp_bytes = tpserve_decode(args.model, args.tokens, args.threads)
        lc_rate = llama_decode(args.model, args.tokens, args.threads)
        tp_gbs = tp_rate * tp_bytes / 1e9
        # llama.cpp reads the file's tensors as they are: the file's size bounds them.
        lc_gbs = lc_rate * weight_bytes / 1e9
        if r == 1:
            print(f"(tpserve holds {tp_bytes / 1e6:.0f} MB of weights resident)", file=sys.stderr)
        fractions["tpserve"].append(tp_gbs / bound)
        fractions["llama.cpp"].append(lc_gbs / bound)
        print(f"| {r} | {bound:.1f} | {tp_rate:.1f} | {tp_gbs:.1f} ({tp_gbs / bound:.2f}) | "
              f"{lc_rate:.1f} | {lc_gbs:.1f} ({lc_gbs / bound:.2f}) |", flush=True)
    print()
    print("median fraction of the bound: " + ", ".join(
        f"{name} {statistics.median(f):.2f}" for name, f in fractions.items()))


if __name__ == "__main__":
    main()

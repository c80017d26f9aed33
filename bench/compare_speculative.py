#!/usr/bin/env python3
"""Decode speed with speculative decoding against without, one tpserve at a time, rounds
alternated: chat requests at temperature 0 whose answers are grounded in their input (repeat,
copy or lightly edit a passage or a function), the task n-gram proposals exist for, and
free-form questions, where they seldom help. Each mode starts its own server per round. Prints
output tokens/s per round (prefill included), decode tokens/s per stream (each answer's tokens
after its first, over the time after its first: batch-1 decode at concurrency 1), the ratios of
medians, and the acceptance (accepted / proposed tokens,
from /metrics) and mean acceptance length (accepted tokens per verified proposal run).

--method ngram (the default) serves the bundled model with --speculative ngram. --method draft
serves the bundled model rewritten at F32 (tpserve-quantize, into build/bench-models/ the first
time) with --speculative draft and the bundled Q4_1 file as the draft: the same weights, the
draft 4x fewer bytes to read per token. --method self serves the bundled model with
--speculative self, its own first --self-spec-layers layers as the draft. --f32-target serves
the F32 rewrite with --method ngram or self too: decode then reads 4x the bytes per token and
is bound by memory bandwidth, as a large model's is on any CPU, where the packed Q4_1 model's
is bound by the integer products, so that each verified row costs a share of a step.

    bench/compare_speculative.py [--method ngram|draft|self] [--self-spec-layers L]
                                 [--concurrency C] [--rounds R] [--tp T]
                                 [--num-speculative-tokens K] [--ngram-min N] [--free-form]
                                 [--f32-target]

At --concurrency 32 the speculating server stops proposing above --spec-disable-batch-size
(8) decoding sequences, which is what keeps a loaded server as fast as without.
"""

import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

from local_server import Server, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PASSAGES = [
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a "
    "single step. All that glitters is not gold. Fortune favours the bold.",
    "Rivers carry water from the mountains to the sea. Along the way they shape valleys, feed "
    "forests and give towns their first reason to exist.",
    "def mean(values):\n    total = 0\n    for value in values:\n        total += value\n"
    "    return total / len(values)\n",
    "Libraries keep books, maps and newspapers for everyone. Their reading rooms are quiet, "
    "their shelves are long, and their doors are open to all.",
]
GROUNDED = ([f"Repeat this text exactly: {p}" for p in PASSAGES]
            + [f"Copy the following, word for word: {p}" for p in PASSAGES])
FREE_FORM = [f"Tell me about {t}." for t in ["the moon", "bread", "chess", "winter", "trains",
                                             "music", "the ocean", "volcanoes"]]
OUTPUT_TOKENS = 128


def chat(port, prompt):
    """Streams one answer: (its tokens, seconds from its first content to its end)."""
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0,
            "max_tokens": OUTPUT_TOKENS, "stream": True,
            "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    first = last = None
    tokens = 0
    with urllib.request.urlopen(request, timeout=600) as reply:
        for line in reply:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                last = time.monotonic()
                first = first or last
    return tokens, (last - first) if first is not None else 0.0


def spec_counters(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {k: int(v) for k, v in re.findall(r"^tpserve:(spec_decode_\w+)_total\{[^}]*\} (\d+)$",
                                               text, re.M)}


def f32_target():
    path = os.path.join(ROOT, "build", "bench-models", "SmolLM2-135M-Instruct.F32.gguf")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([os.path.join(ROOT, "build", "bin", "tpserve-quantize"), MODEL, path,
                        "--type", "f32"], check=True)
    return path


def run(mode, model, prompts, concurrency, tp, k, self_spec_layers, ngram_min):
    port = free_port()
    argv = [os.path.join(ROOT, "build", "bin", "tpserve"), "--model", model, "--tp", str(tp),
            "--http-port", str(port), "-v", "--speculative", mode, "--num-speculative-tokens",
            str(k)]
    if mode == "draft":
        argv += ["--draft-model", MODEL]
    if mode == "self":
        argv += ["--self-spec-layers", str(self_spec_layers)]
    if mode == "ngram" and ngram_min:
        argv += ["--ngram-min", str(ngram_min)]
    server = Server(f"tpserve-{mode}", argv, port)
    try:
        server.wait_ready("/health/ready")
        chat(port, prompts[0])  # warm-up
        work = prompts * max(1, concurrency // len(prompts))
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
            answers = list(pool.map(lambda p: chat(port, p), work))
        tokens = sum(t for t, _ in answers)
        rate = tokens / (time.monotonic() - start)
        # Decode alone, each stream after its first token (prefill and time to first token are
        # the same with and without speculation): tokens after the first per second, per stream.
        decode = sum(t - 1 for t, _ in answers) / max(sum(s for _, s in answers), 1e-9)
        return rate, decode, tokens, spec_counters(port)
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=("ngram", "draft", "self"), default="ngram")
    parser.add_argument("--self-spec-layers", type=int, default=0,
                        help="--method self: the draft's layers (0: the server's default)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--ngram-min", type=int, default=0,
                        help="--method ngram: the server's --ngram-min (0: its default)")
    parser.add_argument("--free-form", action="store_true",
                        help="free-form questions instead of input-grounded ones")
    parser.add_argument("--f32-target", action="store_true",
                        help="serve the F32 rewrite (always so with --method draft)")
    args = parser.parse_args()
    prompts = FREE_FORM if args.free_form else GROUNDED
    model = f32_target() if args.method == "draft" or args.f32_target else MODEL
    rates = {args.method: [], "none": []}
    decode_rates = {args.method: [], "none": []}
    proposed = accepted = runs = spec_output = 0
    for r in range(1, args.rounds + 1):
        for mode in (args.method, "none"):
            rate, decode, tokens, counters = run(mode, model, prompts, args.concurrency, args.tp,
                                                 args.num_speculative_tokens,
                                                 args.self_spec_layers, args.ngram_min)
            rates[mode].append(rate)
            decode_rates[mode].append(decode)
            if mode == args.method:
                spec_output += tokens
            proposed += counters.get("spec_decode_num_draft_tokens", 0)
            accepted += counters.get("spec_decode_num_accepted_tokens", 0)
            runs += counters.get("spec_decode_num_drafts", 0)
            print(f"round {r} speculative {mode}: {rate:.1f} output tok/s, "
                  f"{decode:.1f} decode tok/s per stream", file=sys.stderr)
    on, off = statistics.median(rates[args.method]), statistics.median(rates["none"])
    don, doff = (statistics.median(decode_rates[args.method]),
                 statistics.median(decode_rates["none"]))
    print("decode tok/s per stream  %s: %s (median %.1f)  none: %s (median %.1f)  ratio %.2f"
          % (args.method, " ".join("%.1f" % x for x in decode_rates[args.method]), don,
             " ".join("%.1f" % x for x in decode_rates["none"]), doff, don / doff))
    print("output tok/s  %s: %s (median %.1f)  none: %s (median %.1f)  ratio %.2f  "
          "accepted %d of %d proposed tokens (%.0f%%), %.2f per verified run; verified runs "
          "gave %.0f%% of the output (their accepted tokens and the one each samples after them)"
          % (args.method, " ".join("%.1f" % x for x in rates[args.method]), on,
             " ".join("%.1f" % x for x in rates["none"]), off, on / off, accepted, proposed,
             100.0 * accepted / max(proposed, 1), accepted / max(runs, 1),
             100.0 * (accepted + runs) / max(spec_output, 1)))


if __name__ == "__main__":
    main()

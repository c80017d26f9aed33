#!/usr/bin/env python3
"""tpserve against llama.cpp's llama-server, side by side on this machine, through one client.

Both serve the same GGUF file with the same CPU threads behind an OpenAI-compatible
/v1/completions; the same closed-loop client drives each at every concurrency C (distinct
~117-token prompts, 64 tokens out, greedy, ignore_eos, streamed so that time to first token is
measured), rounds alternated A B A B, and the table gives both sides and tpserve / llama-server.

llama-server is built once for the CPU it runs on (GGML_NATIVE=ON; on a CPU with AMX, every SIMD
extension it has but AMX, whose llama.cpp kernels die of SIGILL there) from the llama.cpp that the
pinned llama-cpp-python==0.3.36 source distribution vendors (scripts/fetch-sdist.sh checks its
sha256), into build/llama-cpp-native/ (~8 minutes on 2 cores): a benchmark tool only, never a
dependency of tpserve. The build is redone when the CPU's model or flags differ from the ones it
was made for.

--model serves another GGUF file (default: the bundled SmolLM2-135M-Instruct Q4_1), e.g. a
1B-class Q4_K_M made by tpserve-mkmodel with a real vocabulary (docs/PERFORMANCE.md).

    bench/compare_llama_server.py [--model M] [--concurrency 1 8 32] [--rounds 2] [--threads 2]
        [--requests-per-client 4] [--tpserve-arg=--cpu-weights=packed ...] [--json results.json]
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

from local_server import Server, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SDIST = ("llama-cpp-python", "0.3.36",
         "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
         "llama_cpp_python-0.3.36.tar.gz", "77MB")
NATIVE = os.path.join(ROOT, "build", "llama-cpp-native")
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


def cpu_identity():
    """The CPU a native build is made for: its model name and instruction-set flags."""
    with open("/proc/cpuinfo") as f:
        lines = [l for l in f if l.startswith(("model name", "flags"))]
    return hashlib.sha256("".join(sorted(set(lines))).encode()).hexdigest()


# ggml's build options for the x86 extensions /proc/cpuinfo names.
GGML_FEATURES = {"avx": "GGML_AVX", "avx2": "GGML_AVX2", "fma": "GGML_FMA", "f16c": "GGML_F16C",
                 "bmi2": "GGML_BMI2", "avx_vnni": "GGML_AVX_VNNI", "avx512f": "GGML_AVX512",
                 "avx512_vbmi": "GGML_AVX512_VBMI", "avx512_vnni": "GGML_AVX512_VNNI",
                 "avx512_bf16": "GGML_AVX512_BF16"}


def cpu_options():
    """GGML_NATIVE=ON, except on a CPU with AMX: there llama.cpp's AMX kernels die of SIGILL
    (tilezero on tiles no ldtilecfg configured, seen on an Intel Xeon VM, 2026-12-07), so the peer
    is built with every SIMD extension the CPU has but AMX."""
    with open("/proc/cpuinfo") as f:
        flags = next(l for l in f if l.startswith("flags")).split(":", 1)[1].split()
    if "amx_tile" not in flags:
        return ["-DGGML_NATIVE=ON"]
    return ["-DGGML_NATIVE=OFF"] + ["-D%s=%s" % (option, "ON" if name in flags else "OFF")
                                    for name, option in GGML_FEATURES.items()]


def llama_cpp_native(target):
    """Path of llama.cpp's `target` (llama-server, llama-bench) built for this CPU, built once."""
    binary = os.path.join(NATIVE, "build", "bin", target)
    stamp = os.path.join(NATIVE, "cpu")
    identity = cpu_identity()
    if os.path.exists(binary) and os.path.exists(stamp) and open(stamp).read() == identity:
        return binary
    tarball = subprocess.run([os.path.join(ROOT, "scripts", "fetch-sdist.sh"), *SDIST],
                             check=True, capture_output=True, text=True).stdout.strip()
    source = os.path.join(NATIVE, "src")
    vendored = f"llama_cpp_python-{SDIST[1]}/vendor/llama.cpp"
    if not os.path.exists(os.path.join(source, "CMakeLists.txt")):
        print(f"compare: unpacking {vendored}", file=sys.stderr)
        os.makedirs(source, exist_ok=True)
        subprocess.run(["tar", "-xzf", tarball, "-C", source, "--strip-components=3", vendored],
                       check=True)
    print("compare: building llama-server and llama-bench for this CPU (GGML_NATIVE=ON, once; "
          "~8 minutes on 2 cores)", file=sys.stderr)
    out = os.path.join(NATIVE, "build")
    subprocess.run(["cmake", "-S", source, "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    *cpu_options(), "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
                    "-DBUILD_SHARED_LIBS=OFF"], check=True, stdout=subprocess.DEVNULL)
    # Ninja's [done/total] lines are the progress.
    subprocess.run(["cmake", "--build", out, "--target", "llama-server", "llama-bench", "-j",
                    str(os.cpu_count())], check=True, stdout=sys.stderr)
    with open(stamp, "w") as f:
        f.write(identity)
    return binary


def start_tpserve(model, extra_args):
    port = free_port()
    argv = [os.path.join(ROOT, "build", "bin", "tpserve"), "--model", model, "--tp", "1",
            "--device", "cpu", "--http-port", str(port), "--kv-cache-blocks", "2048", "-v",
            *extra_args]
    # The launcher gives a lone worker every core: --threads is what llama-server gets.
    server = Server("tpserve", argv, port)
    server.wait_ready("/health/ready")
    return server


def start_llama_server(binary, model, threads, slots):
    port = free_port()
    # Each slot needs room for its prompt and output; -c is shared between the slots.
    argv = [binary, "-m", model, "-t", str(threads), "-np", str(slots), "-cb",
            "-c", str(slots * 512), "--host", "127.0.0.1", "--port", str(port)]
    server = Server("llama-server", argv, port)
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
    parser.add_argument("--model", default=MODEL, help="GGUF file both serve")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="llama-server's threads; tpserve's one worker takes every core")
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--tpserve-arg", action="append", default=[],
                        help="a further tpserve flag, e.g. --tpserve-arg=--cpu-weights=packed")
    parser.add_argument("--json")
    args = parser.parse_args()
    binary = llama_cpp_native("llama-server")

    rows = []
    next_id = 0
    for c in args.concurrency:
        for r in range(1, args.rounds + 1):
            for side in ("tpserve", "llama-server"):
                print(f"compare: C={c} round {r}/{args.rounds}: {side}", file=sys.stderr)
                server = (start_tpserve(args.model, args.tpserve_arg) if side == "tpserve"
                          else start_llama_server(binary, args.model, args.threads, max(c, 1)))
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

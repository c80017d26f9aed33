#!/usr/bin/env python3
"""Token delivery latency: how long a token takes from the engine handing it to its request
(right after the step that made it) to its SSE bytes going into the client's socket, at N
concurrent streams on the bundled model.

The coordinator measures it (tpserve:token_delivery_seconds, a histogram); this script starts a
local cluster, runs the streams (raw HTTP over asyncio, one process), and reads the histogram's
growth over the run: p50, p90 and p99 interpolated within their buckets as Prometheus'
histogram_quantile does, and the mean from _sum / _count. It also samples the coordinator's
thread count.

On a CPU-only machine the step's compute and the front end share the cores, so a token waits for
the scheduler to give the coordinator's I/O thread a core back; with --pin the workers get every
core but the first, and the coordinator the first alone, as on a GPU host where the step runs on
the GPU and leaves the CPUs to the front end (this script shares the workers' cores).

Over loopback, the kernel runs the client's side of TCP (receiving, waking the reader) in the
sender's context: the coordinator's core pays for its clients' receive path, which with clients on
other machines runs there. --remote-clients (root; Linux RPS) hands the loopback device's received
packets to the client's cores for the run, and restores the setting after.

  bench/token_delivery.py --streams 256 --max-tokens 64 [--pin [--remote-clients]]
                          [--http-io-threads N]
"""

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import time
import urllib.request

from local_server import Server, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FAMILY = "tpserve:token_delivery_seconds"


def histogram(port):
    """{le: cumulative count}, sum, count of the delivery histogram."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    buckets = {}
    for le, value in re.findall(FAMILY + r'_bucket\{[^}]*le="([^"]+)"\} (\S+)', text):
        buckets[float(le)] = float(value)
    total = float(re.search(FAMILY + r"_sum\{[^}]*\} (\S+)", text).group(1))
    count = float(re.search(FAMILY + r"_count\{[^}]*\} (\S+)", text).group(1))
    return buckets, total, count


def quantile(q, buckets):
    """histogram_quantile(q) over cumulative `buckets` {le: count}."""
    bounds = sorted(buckets)
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        if buckets[le] >= rank:
            if le == float("inf"):
                return lower
            inside = buckets[le] - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 0)
        lower, below = le, buckets[le]
    return lower


async def stream(port, body, done):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                  f"Connection: close\r\n\r\n").encode() + body)
    await writer.drain()
    tail = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        tail = (tail + data)[-64:]
        if b"data: [DONE]" in tail:
            break
    writer.close()
    done[0] += 1


def coordinator_pid(launcher_pid):
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        for pid in f.read().split():
            with open(f"/proc/{pid}/cmdline", "rb") as c:
                if b"tpserve-coordinator" in c.read().split(b"\0")[0]:
                    return int(pid)
    raise SystemExit("token_delivery: the launcher has no tpserve-coordinator child")


def coordinator_threads(launcher_pid):
    with open(f"/proc/{coordinator_pid(launcher_pid)}/status") as s:
        return int(re.search(r"^Threads:\s+(\d+)", s.read(), re.M).group(1))


def pin_front_end(launcher_pid, core, others):
    """The coordinator's threads on `core`; this process on the `others`, with the workers."""
    pid = coordinator_pid(launcher_pid)
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {core})
    os.sched_setaffinity(0, set(others))


LOOPBACK_RPS = "/sys/class/net/lo/queues/rx-0/rps_cpus"


@contextlib.contextmanager
def loopback_receive_on(cores):
    """Received loopback packets processed on `cores` (RPS) while inside; the old mask after."""
    with open(LOOPBACK_RPS) as f:
        old = f.read().strip()
    mask = sum(1 << core for core in cores)
    try:
        with open(LOOPBACK_RPS, "w") as f:
            f.write(f"{mask:x}")
    except PermissionError:
        raise SystemExit(f"token_delivery: --remote-clients writes {LOOPBACK_RPS}: run as root")
    try:
        yield
    finally:
        with open(LOOPBACK_RPS, "w") as f:
            f.write(old)


async def run_streams(port, n, max_tokens, launcher_pid):
    body = json.dumps({"prompt": "Tell me a long story about the sea.", "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True}).encode()
    done = [0]
    tasks = [asyncio.create_task(stream(port, body, done)) for _ in range(n)]
    threads = 0
    last_report = time.monotonic()
    while not all(t.done() for t in tasks):
        threads = max(threads, coordinator_threads(launcher_pid))
        if time.monotonic() - last_report >= 5:
            print(f"token_delivery: {done[0]}/{n} streams done", file=sys.stderr)
            last_report = time.monotonic()
        await asyncio.sleep(0.1)
    for t in tasks:
        t.result()
    return threads


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--http-io-threads", type=int, default=0,
                        help="the coordinator's --http-io-threads (0: its default)")
    parser.add_argument("--pin", action="store_true",
                        help="the coordinator alone on the first core; workers and client on the others")
    parser.add_argument("--remote-clients", action="store_true",
                        help="with --pin: the clients' TCP receive path on their own cores, as for "
                        "clients on other machines (root)")
    args = parser.parse_args()
    if args.remote_clients and not args.pin:
        raise SystemExit("token_delivery: --remote-clients needs --pin")

    port = free_port()
    argv = [os.path.join(ROOT, "build", "bin", "tpserve"), "--model", args.model, "--tp",
            str(args.tp), "--http-port", str(port), "-v", "--http-io-threads",
            str(args.http_io_threads)]
    cores = sorted(os.sched_getaffinity(0))
    if args.pin:
        if len(cores) < 2:
            raise SystemExit("token_delivery: --pin needs two cores")
        argv = ["taskset", "-c", ",".join(map(str, cores[1:]))] + argv
    server = Server("tpserve", argv, port)
    try:
        print("token_delivery: starting the cluster", file=sys.stderr)
        server.wait_ready("/health/ready")
        if args.pin:
            pin_front_end(server.process.pid, cores[0], cores[1:])
        receive = loopback_receive_on(cores[1:]) if args.remote_clients else contextlib.nullcontext()
        with receive:
            asyncio.run(run_streams(port, 4, 8, server.process.pid))  # warm-up
            before, sum_before, count_before = histogram(port)
            start = time.monotonic()
            threads = asyncio.run(
                run_streams(port, args.streams, args.max_tokens, server.process.pid))
            seconds = time.monotonic() - start
            after, sum_after, count_after = histogram(port)
    finally:
        server.stop()
    grown = {le: after[le] - before.get(le, 0) for le in after}
    count = count_after - count_before
    print(f"{args.streams} streams x {args.max_tokens} tokens in {seconds:.1f} s"
          f"{' (pinned)' if args.pin else ''}{', remote clients' if args.remote_clients else ''}; "
          f"{int(count)} deliveries measured; coordinator threads at most {threads}")
    print(f"token delivery: mean {1e3 * (sum_after - sum_before) / max(count, 1):.3f} ms, "
          f"p50 {1e3 * quantile(0.5, grown):.3f} ms, p90 {1e3 * quantile(0.9, grown):.3f} ms, "
          f"p99 {1e3 * quantile(0.99, grown):.3f} ms")


if __name__ == "__main__":
    main()

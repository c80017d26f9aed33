"""No thread per request: 2,000 concurrent SSE streams on the bundled model, and the coordinator's
thread count stays under 64 while they run.

Every stream is a raw HTTP/1.1 connection driven by asyncio in this one process. The test waits
until all of them are open at once (their responses' heads in, none finished), samples the
coordinator's `Threads:` from /proc while they stream, and checks that each ends with its
max_tokens of usage, "length" and [DONE].
"""

import asyncio
import json
import os
import resource
import time
import unittest

from sse_outcome import SseOutcome
from tpserve_cluster import coordinator_pid, parsed_args, run_tests, start_class_cluster

STREAMS = 2000
MAX_TOKENS = 2
THREAD_LIMIT = 64
# Each connection is a file descriptor here and in the coordinator (which inherits the limit).
FILES_NEEDED = 2 * STREAMS + 512


def raise_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FILES_NEEDED:
        if hard != resource.RLIM_INFINITY and hard < FILES_NEEDED:
            raise unittest.SkipTest(f"the file limit {hard} is below {FILES_NEEDED}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (FILES_NEEDED, hard))


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no Threads: line for {pid}")


class Stream(SseOutcome):
    def __init__(self):
        super().__init__()
        self.headed = False


async def run_stream(host, port, body, stream, open_streams):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write((f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                      f"Connection: close\r\n\r\n").encode() + body)
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            stream.error = status.decode(errors="replace") + (await reader.read()).decode(
                errors="replace")
            return
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        stream.headed = True
        open_streams[0] += 1
        buffer = b""
        while not stream.done:
            data = await reader.read(65536)
            if not data:
                break
            buffer += data
            # Chunked framing aside, every SSE event is one "data: ...\n\n" line.
            for line in buffer.split(b"\n")[:-1]:
                stream.feed(line)
            buffer = buffer.rsplit(b"\n", 1)[-1]
        open_streams[0] -= 1
    finally:
        writer.close()


class ManyStreams(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise_file_limit()
        cls.cluster = start_class_cluster(cls, tp=1)
        cls.coordinator = coordinator_pid(cls.cluster.process.pid)

    def test_two_thousand_streams_run_on_few_threads(self):
        host, port = self.cluster.http_address.rsplit(":", 1)
        body = json.dumps({"prompt": "Count slowly from one to a hundred:", "max_tokens": MAX_TOKENS,
                           "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}}).encode()
        streams = [Stream() for _ in range(STREAMS)]
        open_streams = [0]
        samples = []
        most_open = 0
        all_open_after = None
        idle_threads = threads_of(self.coordinator)
        started = time.monotonic()

        async def main():
            nonlocal most_open, all_open_after
            tasks = [asyncio.create_task(run_stream(host, int(port), body, s, open_streams))
                     for s in streams]
            while not all(t.done() for t in tasks):
                most_open = max(most_open, open_streams[0])
                if most_open == STREAMS and all_open_after is None:
                    all_open_after = time.monotonic() - started
                if open_streams[0] > 0:
                    samples.append(threads_of(self.coordinator))
                await asyncio.sleep(0.05)
                self.assertLess(time.monotonic() - started, 600, "the streams did not finish")
            for t in tasks:
                t.result()

        asyncio.run(main())
        failed = [s.error for s in streams if s.error is not None]
        self.assertEqual(failed, [], f"{len(failed)} streams failed, the first: {failed[:1]}")
        for i, s in enumerate(streams):
            self.assertTrue(s.done, f"stream {i} has no [DONE]")
            self.assertEqual(s.finish_reason, "length", f"stream {i}")
            self.assertEqual(s.completion_tokens, MAX_TOKENS, f"stream {i}")
        print(f"{STREAMS} streams, at most {most_open} open at once (all after "
              f"{all_open_after} s), done after {time.monotonic() - started:.1f} s; coordinator "
              f"threads: {idle_threads} idle, at most {max(samples)} over {len(samples)} samples")
        self.assertEqual(most_open, STREAMS, "the streams were never all open at once")
        self.assertLess(max(samples), THREAD_LIMIT)

    def test_threads_are_named_for_their_roles(self):
        task_dir = f"/proc/{self.coordinator}/task"
        names = set()
        for task in os.listdir(task_dir):
            with open(f"{task_dir}/{task}/comm") as f:
                names.add(f.read().strip())
        for role in ("tp-engine", "tp-http-io", "tp-front-end", "tp-heartbeat", "tp-signals"):
            self.assertIn(role, names)


if __name__ == "__main__":
    run_tests()

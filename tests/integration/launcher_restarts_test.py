"""The `tpserve` launcher starts a worker that dies again, and the stream in flight goes on.

A --tp 3 cluster from the launcher with --worker-restarts 1. A greedy streamed completion runs
once on the healthy cluster; then the same request again, and rank 1's worker is SIGKILLed once
a few chunks have arrived: the launcher starts it again, the coordinator holds the request until
the group re-forms, and the streamed text equals the first. A second death finds no restart left:
the launcher stops the cluster and exits with an error naming the worker and how it ended.

    launcher_restarts_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import os
import signal
import time
import unittest
import urllib.request

from tpserve_cluster import Cluster, parsed_args, run_tests

BODY = {"prompt": "Write a few sentences about a lighthouse.", "max_tokens": 48,
        "temperature": 0, "ignore_eos": True, "stream": True}
KILL_AFTER_CHUNKS = 5


def worker_pid(launcher_pid, rank):
    """The pid of the launcher's child running tpserve-worker --rank `rank`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if (ppid == launcher_pid and argv[0].endswith(b"tpserve-worker")
                and argv[argv.index(b"--rank") + 1] == str(rank).encode()):
            return int(entry)
    raise AssertionError(f"no worker of rank {rank} under the launcher (pid {launcher_pid})")


def stream(url, on_chunk=lambda n: None):
    """The concatenated text of a streamed completion; on_chunk(count) after each chunk."""
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(BODY).encode(),
                                     headers={"Content-Type": "application/json"})
    text, chunks = "", 0
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if "error" in event:
                raise AssertionError(f"the stream failed: {event['error']['message']}")
            text += event["choices"][0]["text"]
            chunks += 1
            on_chunk(chunks)
    return text


def wait_serving(url, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("the cluster does not serve again")


class LauncherRestartsWorkers(unittest.TestCase):
    def test_dead_worker_is_started_again_and_the_stream_goes_on(self):
        args = parsed_args()
        with Cluster(args.bin_dir, args.model, tp=3,
                     extra_args=["--worker-restarts", "1", "--recovery-grace", "60"]) as cluster:
            healthy = stream(cluster.http_url)
            launcher = cluster.process.pid

            def kill_rank_1(chunks):
                if chunks == KILL_AFTER_CHUNKS:
                    os.kill(worker_pid(launcher, 1), signal.SIGKILL)

            resumed = stream(cluster.http_url, kill_rank_1)
            self.assertEqual(resumed, healthy, cluster.log_tail())
            self.assertIn("starting it again (0 restarts left)", cluster.log_tail(200))
            with urllib.request.urlopen(cluster.http_url + "/metrics", timeout=10) as response:
                metrics = response.read().decode()
            self.assertRegex(metrics, r'tpserve:requests_resumed_total\{[^}]*\} 1\n',
                             "the request was not held and resumed")

            wait_serving(cluster.http_url)
            os.kill(worker_pid(launcher, 1), signal.SIGKILL)
            status = cluster.process.wait(timeout=60)
            self.assertNotEqual(status, 0)
            self.assertIn("killed by signal 9", cluster.log_tail(20))


if __name__ == "__main__":
    run_tests()

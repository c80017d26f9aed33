"""SIGTERM drains the coordinator: readiness turns 503 and new requests are refused at once, the
streams in flight finish within --shutdown-timeout (those that cannot end with an error event,
none is cut without one), the workers are told to stop, and every process exits 0. SIGTERM on a
worker drains its group the same way; the rank exits 0, and once it is started again the cluster
admits requests again.

The coordinator and three workers are started directly (not through the launcher, which would
restart a coordinator that exits), on 127.0.0.1 with ports chosen at run time and a cluster token.
"""

import http.client
import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from sse_outcome import SseOutcome
from tpserve_cluster import die_with_parent, parsed_args, run_tests

PROMPT = "Write a long story about a lighthouse keeper."
STREAMS = 8


class Processes:
    """A coordinator with --world-size 3 and its three workers, every one stopped on exit."""

    def __init__(self, shutdown_timeout_s):
        self.args = parsed_args()
        self.shutdown_timeout_s = shutdown_timeout_s
        self.tmp = tempfile.TemporaryDirectory(prefix="tpserve-shutdown-")
        self.coordinator = None
        self.workers = []
        self.http_address = None

    def _start(self, name, argv):
        with open(os.path.join(self.tmp.name, name + ".log"), "w") as log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=die_with_parent)

    def _read_port(self, name, deadline):
        path = os.path.join(self.tmp.name, name)
        while time.monotonic() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    return int(f.read())
            if self.coordinator.poll() is not None:
                raise AssertionError("the coordinator exited:\n" + self.log("coordinator"))
            time.sleep(0.05)
        raise AssertionError(f"no {name} within the deadline")

    def __enter__(self):
        token = os.path.join(self.tmp.name, "token")
        with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(secrets.token_hex(32))
        bin_dir = self.args.bin_dir
        self.coordinator = self._start("coordinator", [
            os.path.join(bin_dir, "tpserve-coordinator"), "--model", self.args.model,
            "--world-size", "3", "--port", "0", "--port-file", f"{self.tmp.name}/port",
            "--http-port", "0", "--http-port-file", f"{self.tmp.name}/http-port",
            "--admin-port", "0", "--cluster-token-file", token,
            "--shutdown-timeout", str(self.shutdown_timeout_s)])
        deadline = time.monotonic() + 60
        port = self._read_port("port", deadline)
        self.http_address = f"127.0.0.1:{self._read_port('http-port', deadline)}"
        self.worker_argv = [[
            os.path.join(bin_dir, "tpserve-worker"), "--coordinator", f"127.0.0.1:{port}",
            "--rank", str(rank), "--model", self.args.model, "--threads", "1",
            "--cluster-token-file", token] for rank in range(3)]
        for rank in range(3):
            self.workers.append(self._start(f"worker-{rank}", self.worker_argv[rank]))
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s=180):
        deadline = time.monotonic() + timeout_s
        while self.ready()[0] != 200:
            if time.monotonic() > deadline or self.coordinator.poll() is not None:
                raise AssertionError("not ready:\n" + self.log("coordinator"))
            time.sleep(0.2)

    def restart_worker(self, rank):
        self.workers[rank] = self._start(f"worker-{rank}-again", self.worker_argv[rank])

    def __exit__(self, *exc):
        for p in [self.coordinator] + self.workers:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.tmp.cleanup()

    def log(self, name):
        with open(os.path.join(self.tmp.name, name + ".log")) as f:
            return "".join(f.readlines()[-40:])

    def request(self, method, path, body=None, timeout=10):
        conn = http.client.HTTPConnection(self.http_address, timeout=timeout)
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        conn.close()
        return reply.status, data

    def ready(self):
        try:
            return self.request("GET", "/health/ready", timeout=2)
        except OSError as e:
            return None, str(e)


class Stream(threading.Thread):
    """One streamed completion, its events kept: text chunks, the finish, an error, [DONE]."""

    def __init__(self, address, max_tokens):
        super().__init__(daemon=True)
        self.address = address
        self.max_tokens = max_tokens
        self.started = threading.Event()
        self.outcome = SseOutcome()
        self.failure = None

    def run(self):
        try:
            conn = http.client.HTTPConnection(self.address, timeout=120)
            conn.request("POST", "/v1/completions", body=json.dumps({
                "prompt": PROMPT, "max_tokens": self.max_tokens, "temperature": 0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}),
                headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            if reply.status != 200:
                self.failure = f"HTTP {reply.status}: {reply.read()!r}"
                return
            while not self.outcome.done:
                line = reply.readline()
                if not line:
                    break
                if self.outcome.feed(line):
                    self.started.set()
            conn.close()
        except Exception as e:  # the test reports it
            self.failure = repr(e)
        finally:
            self.started.set()


class GracefulShutdown(unittest.TestCase):
    def start_streams(self, cluster, max_tokens):
        streams = [Stream(cluster.http_address, max_tokens) for _ in range(STREAMS)]
        for s in streams:
            s.start()
        for s in streams:
            self.assertTrue(s.started.wait(120), "a stream never started")
            self.assertIsNone(s.failure, s.failure)
        return streams

    def sigterm_and_check_refusals(self, cluster, streams, process=None):
        """SIGTERM to `process` (the coordinator); then readiness is 503 and a new request gets
        503 while streams still run."""
        (process or cluster.coordinator).send_signal(signal.SIGTERM)
        sent = time.monotonic()
        status = None
        while time.monotonic() - sent < 2:
            status, _ = cluster.ready()
            if status == 503:
                break
            time.sleep(0.02)
        self.assertEqual(status, 503, "readiness did not turn 503 within 2 s of SIGTERM")
        status, body = cluster.request("POST", "/v1/completions",
                                       {"prompt": PROMPT, "max_tokens": 4})
        self.assertEqual(status, 503, body)
        self.assertIn("shutting down", json.loads(body)["error"]["message"], body)
        self.assertTrue(any(s.is_alive() for s in streams),
                        "every stream ended before the refusals were checked: nothing was in flight")
        return sent

    def wait_exits(self, cluster, within_s):
        for name, p in [("coordinator", cluster.coordinator)] + [
                (f"worker-{r}", w) for r, w in enumerate(cluster.workers)]:
            try:
                rc = p.wait(timeout=within_s)
            except subprocess.TimeoutExpired:
                self.fail(f"{name} still runs {within_s} s after SIGTERM:\n" + cluster.log(name))
            self.assertEqual(rc, 0, f"{name} exited {rc}:\n" + cluster.log(name))

    def assert_completed(self, streams, max_tokens):
        for i, s in enumerate(streams):
            s.join(10)
            self.assertIsNone(s.failure, f"stream {i}: {s.failure}")
            self.assertIsNone(s.outcome.error, f"stream {i} ended with an error")
            self.assertEqual(s.outcome.finish_reason, "length", f"stream {i}")
            self.assertEqual(s.outcome.completion_tokens, max_tokens, f"stream {i}")
            self.assertTrue(s.outcome.done, f"stream {i} has no [DONE]")

    def test_streams_in_flight_finish_then_every_process_exits_0(self):
        timeout_s = 30
        with Processes(shutdown_timeout_s=timeout_s) as cluster:
            streams = self.start_streams(cluster, max_tokens=128)
            sent = self.sigterm_and_check_refusals(cluster, streams)
            self.wait_exits(cluster, within_s=timeout_s + 10)
            self.assertLess(time.monotonic() - sent, timeout_s + 5)
            self.assert_completed(streams, 128)

    def test_streams_past_the_timeout_end_with_an_error_event(self):
        timeout_s = 2
        with Processes(shutdown_timeout_s=timeout_s) as cluster:
            # Far more tokens than 8 streams make in 2 s on any CPU this runs on.
            streams = self.start_streams(cluster, max_tokens=6000)
            sent = self.sigterm_and_check_refusals(cluster, streams)
            self.wait_exits(cluster, within_s=timeout_s + 15)
            for i, s in enumerate(streams):
                s.join(10)
                self.assertIsNone(s.failure, f"stream {i}: {s.failure}")
                self.assertIsNone(s.outcome.finish_reason, f"stream {i} finished: the test proves nothing")
                self.assertIsNotNone(s.outcome.error, f"stream {i} was cut without an error event")
                self.assertIn("shutting down", s.outcome.error["message"], f"stream {i}")
                self.assertTrue(s.outcome.done, f"stream {i} has no [DONE] after its error")
            print(f"exited {time.monotonic() - sent:.1f} s after SIGTERM "
                  f"(--shutdown-timeout {timeout_s})")

    def test_sigterm_on_a_worker_drains_its_group(self):
        with Processes(shutdown_timeout_s=30) as cluster:
            streams = self.start_streams(cluster, max_tokens=128)
            self.sigterm_and_check_refusals(cluster, streams, process=cluster.workers[1])
            try:
                rc = cluster.workers[1].wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.fail("rank 1 still runs 40 s after SIGTERM:\n" + cluster.log("worker-1"))
            self.assertEqual(rc, 0, cluster.log("worker-1"))
            self.assert_completed(streams, 128)
            self.assertIsNone(cluster.coordinator.poll(), "the coordinator exited")
            status, body = cluster.request("POST", "/v1/completions",
                                           {"prompt": PROMPT, "max_tokens": 4})
            self.assertEqual(status, 503, body)
            self.assertIn("rank 1", json.loads(body)["error"]["message"])
            cluster.restart_worker(1)
            cluster.wait_ready(timeout_s=120)
            status, body = cluster.request("POST", "/v1/completions",
                                           {"prompt": PROMPT, "max_tokens": 4})
            self.assertEqual(status, 200, body)


if __name__ == "__main__":
    run_tests()

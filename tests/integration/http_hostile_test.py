"""Hostile HTTP clients against a T=1 cluster (real processes on 127.0.0.1, ports chosen at run
time), through raw sockets and urllib:

1. 500 slowloris connections (one header byte a second): /health answers within 1 s throughout,
   and connections beyond --http-max-connections are answered 503 at once.
2. 20 non-streaming clients that disconnect mid-generation: no request is running 1 s later.
3. 64 concurrent non-streaming clients: every one gets its 200, none a reset.
4. Oversize bodies (with Content-Length, and chunked): 413 with an OpenAI error body; the
   coordinator's resident memory after 50 of them stays within 64 MiB of where it started.
5. A body nesting JSON 100,000 deep: 400, and the server still serves.

    http_hostile_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import concurrent.futures
import json
import re
import socket
import time
import unittest
import urllib.error
import urllib.request

import tpserve_cluster

SLOW_CONNECTIONS = 500
MAX_CONNECTIONS = 600  # the cluster's --http-max-connections
HEALTH_BOUND_S = 1.0
DISCONNECTING_CLIENTS = 20
CONCURRENT_CLIENTS = 64
OVERSIZE_BODIES = 50
OVERSIZE_BYTES = 10 << 20  # over the default 8 MiB limit
RSS_GROWTH_BOUND_KIB = 64 << 10
_RUNNING = re.compile(r"^tpserve:num_requests_running\{[^}]*\} (\S+)$", re.M)


def http(url, body=None, timeout=30):
    """(status, body bytes); raises on a broken connection."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def connect(address):
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def raw_response(sock):
    """The status code of the HTTP response on `sock`, read until its head ends."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", data)
    if match is None:
        raise AssertionError(f"not an HTTP response: {data[:200]!r}")
    return int(match.group(1))


def completion(max_tokens, prompt="Tell me a long story about the sea."):
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}


class HttpHostileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        args = tpserve_cluster.parsed_args()
        cls.cluster = tpserve_cluster.Cluster(
            args.bin_dir, args.model, tp=1,
            extra_args=["--http-max-connections", str(MAX_CONNECTIONS)])
        cls.cluster.__enter__()
        cls.addClassCleanup(cls.cluster.stop)
        cls.url = cls.cluster.http_url
        cls.pid = tpserve_cluster.coordinator_pid(cls.cluster.process.pid)

    def health_time(self):
        start = time.monotonic()
        status, body = http(self.url + "/health", timeout=10)
        elapsed = time.monotonic() - start
        self.assertEqual(status, 200, body)
        return elapsed

    def running(self):
        _, body = http(self.url + "/metrics")
        return float(_RUNNING.search(body.decode()).group(1))

    def assertServes(self):
        status, body = http(self.url + "/v1/completions", completion(4))
        self.assertEqual(status, 200, body)

    def test_slowloris_does_not_starve_health(self):
        slow = []
        try:
            for _ in range(SLOW_CONNECTIONS):
                sock = connect(self.cluster.http_address)
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                slow.append(sock)
            worst = 0.0
            for _ in range(4):
                for sock in slow:
                    sock.sendall(b"X")
                worst = max(worst, self.health_time())
                time.sleep(1)
            self.assertLess(worst, HEALTH_BOUND_S)
            # Past the limit a connection is answered 503 at once, not left waiting.
            over = []
            try:
                for _ in range(MAX_CONNECTIONS - SLOW_CONNECTIONS + 20):
                    over.append(connect(self.cluster.http_address))
                over[-1].settimeout(5)
                self.assertEqual(raw_response(over[-1]), 503)
            finally:
                for sock in over:
                    sock.close()
        finally:
            for sock in slow:
                sock.close()
        self.assertLess(self.health_time(), HEALTH_BOUND_S)
        self.assertServes()

    def test_disconnected_clients_stop_their_requests(self):
        body = json.dumps(completion(4000)).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        clients = []
        for _ in range(DISCONNECTING_CLIENTS):
            sock = connect(self.cluster.http_address)
            sock.sendall(head + body)
            clients.append(sock)
        deadline = time.monotonic() + 60
        while self.running() < DISCONNECTING_CLIENTS:
            self.assertLess(time.monotonic(), deadline, "the requests never all ran")
            time.sleep(0.1)
        for sock in clients:
            sock.close()
        closed = time.monotonic()
        while self.running() > 0:
            self.assertLess(time.monotonic() - closed, 1.0,
                            f"{self.running()} requests still run 1 s after their clients left")
            time.sleep(0.05)
        self.assertServes()

    def test_concurrent_clients_are_all_answered(self):
        def one(i):
            return http(self.url + "/v1/completions", completion(16, f"Client {i} says"), 120)

        with concurrent.futures.ThreadPoolExecutor(CONCURRENT_CLIENTS) as pool:
            results = list(pool.map(one, range(CONCURRENT_CLIENTS)))  # a reset raises here
        self.assertEqual([status for status, _ in results], [200] * CONCURRENT_CLIENTS,
                         [body[:200] for status, body in results if status != 200])

    def test_oversize_bodies_are_refused_without_memory(self):
        start = tpserve_cluster.rss_kib(self.pid)
        oversize = b"x" * OVERSIZE_BYTES
        for i in range(OVERSIZE_BODIES):
            if i % 5 == 4:
                # Chunked: no Content-Length to refuse from; the limit stops the read.
                sock = connect(self.cluster.http_address)
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                try:
                    for _ in range(OVERSIZE_BYTES // (1 << 20)):
                        sock.sendall(b"100000\r\n" + b"x" * (1 << 20) + b"\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                sock.settimeout(10)
                self.assertEqual(raw_response(sock), 413)
                sock.close()
                continue
            status, body = http(self.url + "/v1/completions", oversize)
            self.assertEqual(status, 413, body[:200])
            self.assertIn("larger than the limit", json.loads(body)["error"]["message"])
        grown = tpserve_cluster.rss_kib(self.pid) - start
        self.assertLess(grown, RSS_GROWTH_BOUND_KIB,
                        f"RSS grew by {grown} KiB over {OVERSIZE_BODIES} refused bodies")
        self.assertServes()

    def test_deep_json_is_refused(self):
        status, body = http(self.url + "/v1/completions", b"[" * 100_000 + b"]" * 100_000)
        self.assertEqual(status, 400, body[:200])
        self.assertIn("deeper than", json.loads(body)["error"]["message"])
        self.assertServes()


if __name__ == "__main__":
    tpserve_cluster.run_tests()

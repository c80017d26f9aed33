"""One hostile request affects only itself: against a tp 3 CPU cluster (real processes on
127.0.0.1, ports chosen at run time, an API key), a streaming request runs in the background
while each hostile request below is sent in turn:

- a JSON schema that requires itself (its forced continuation never ends), an EBNF grammar
  that never ends (root ::= "a" root), one whose language dies after one token, an empty one;
- a chat turn whose tool call's `arguments` nest 200,000 brackets deep;
- a 4 MB one-word prompt, 60,000 tools, 2,000,000 stop token ids, 16 stop strings of 200 KB, an
  8 MB one-word text to gRPC Tokenize;
- a schema that compiles for longer than --grammar-compile-timeout;
- a 250 MB gRPC Generate and an 8 MB HTTP body, both without the key.

Each is answered (4xx, or 200 ending by itself) within 10 s; the background stream never
pauses more than 2 s; tpserve:recoveries_total does not move; the coordinator stays alive and
its resident memory within 512 MiB of where it started.

    hostile_requests_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import http.client
import json
import re
import threading
import time
import unittest

import tpserve_cluster

KEY = "hostile-test-key"
ANSWER_BOUND_S = 10.0
STREAM_PAUSE_BOUND_S = 2.0
RSS_GROWTH_BOUND_KIB = 512 << 10
COMPILE_TIMEOUT_S = 2
_RECOVERIES = re.compile(r"^tpserve:recoveries_total(?:\{[^}]*\})? (\S+)$", re.M)

# Each `.{0,127}` under xgrammar's unrolling threshold of 128 is unrolled into a chain of states
# over the whole vocabulary: six of them take ~7 s to compile here, alone, well past
# COMPILE_TIMEOUT_S (found by timing candidate schemas against the SmolLM2 vocabulary).
SLOW_SCHEMA = {"type": "string",
               "pattern": "^.{0,127}-.{0,127}-.{0,127}-.{0,127}-.{0,127}-.{0,127}-$"}


def request(address, method, path, body=None, key=KEY, timeout=60):
    """(status, parsed JSON or raw bytes) of one HTTP request."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    try:
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, raw


class BackgroundStream(threading.Thread):
    """Streams long completions one after another until stopped; records the longest pause
    between two chunks of one stream."""

    def __init__(self, address):
        super().__init__(daemon=True)
        self.address = address
        self.stopping = threading.Event()
        self.longest_pause = 0.0
        self.chunks = 0
        self.error = None

    def run(self):
        host, port = self.address.rsplit(":", 1)
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True,
                           "temperature": 0, "stream": True}).encode()
        try:
            while not self.stopping.is_set():
                connection = http.client.HTTPConnection(host, int(port), timeout=30)
                connection.request("POST", "/v1/completions", body=body,
                                   headers={"Content-Type": "application/json",
                                            "Authorization": f"Bearer {KEY}"})
                response = connection.getresponse()
                if response.status != 200:
                    raise AssertionError(f"background stream: HTTP {response.status}")
                last = None
                while not self.stopping.is_set():
                    line = response.readline()
                    if not line:
                        break
                    if not line.startswith(b"data: "):
                        continue
                    now = time.monotonic()
                    if last is not None:
                        self.longest_pause = max(self.longest_pause, now - last)
                    last = now
                    self.chunks += 1
                    if line.strip() == b"data: [DONE]":
                        break
                connection.close()
        except Exception as error:  # reported by the test
            self.error = error


class HostileRequestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-hostile-")
        cls.cluster = tpserve_cluster.start_class_cluster(
            cls, tp=3, extra_args=["--api-key", KEY,
                                   "--grammar-compile-timeout", str(COMPILE_TIMEOUT_S)])
        cls.address = cls.cluster.http_address
        cls.coordinator = tpserve_cluster.coordinator_pid(cls.cluster.process.pid)

    def recoveries(self):
        status, text = request(self.address, "GET", "/metrics", key=None)
        self.assertEqual(status, 200)
        return float(_RECOVERIES.search(text.decode()).group(1))

    def answered(self, what, send):
        """Runs send() -> (status, body) and checks it answers 4xx, or 200, within the bound."""
        start = time.monotonic()
        status, body = send()
        took = time.monotonic() - start
        self.assertLess(took, ANSWER_BOUND_S, f"{what}: answered after {took:.1f} s")
        self.assertTrue(status == 200 or 400 <= status < 500, f"{what}: HTTP {status} {body!r:.300}")
        return status, body

    def grpc_call(self, call):
        """call(stub) on a fresh channel to the client port, answered as (HTTP-like status, text)."""
        import grpc

        codes = {grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.INVALID_ARGUMENT: 400}
        options = [("grpc.max_send_message_length", 300 << 20)]
        with grpc.insecure_channel(self.cluster.grpc_address, options=options) as channel:
            try:
                call(self.protos.inference_pb2_grpc.InferenceServiceStub(channel))
            except grpc.RpcError as error:
                return codes.get(error.code(), 500), str(error.details())
        return 200, "answered"

    def chat(self, body):
        return request(self.address, "POST", "/v1/chat/completions", body)

    def completion(self, body):
        return request(self.address, "POST", "/v1/completions", body)

    def test_each_hostile_request_fails_only_itself(self):
        recoveries = self.recoveries()
        rss_start = tpserve_cluster.rss_kib(self.coordinator)
        stream = BackgroundStream(self.address)
        stream.start()
        deadline = time.monotonic() + 60
        while stream.chunks < 5 and stream.error is None and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertGreaterEqual(stream.chunks, 5, f"the background stream did not start: "
                                f"{stream.error}")
        user = [{"role": "user", "content": "Write JSON."}]
        self_ref = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"],
                    "additionalProperties": False}

        # The forced text never ends: the output is bounded by max_tokens as any other is (the
        # coordinator once grew without bound inside a single jump forward).
        status, body = self.answered("self-referencing schema", lambda: self.chat(
            {"messages": user, "max_tokens": 1000, "response_format": {
                "type": "json_schema", "json_schema": {
                "name": "loop", "schema": self_ref}}}))
        if status == 200:
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            self.assertTrue(body["choices"][0]["message"]["content"].startswith('{"a":{"a":'))

        status, body = self.answered("endless grammar", lambda: self.completion(
            {"prompt": "a", "max_tokens": 1000, "guided_grammar": 'root ::= "a" root'}))
        if status == 200:
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            self.assertEqual(set(body["choices"][0]["text"]), {"a"})

        status, body = self.answered("dead-end grammar", lambda: self.completion(
            {"prompt": "a", "max_tokens": 8, "guided_grammar": 'root ::= "a" [^\\u0000-\\U0010FFFF]'}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "guided_grammar", body)

        status, body = self.answered("empty grammar", lambda: self.completion(
            {"prompt": "a", "max_tokens": 8, "guided_grammar": "root ::= [^\\u0000-\\U0010FFFF]"}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "guided_grammar", body)

        nested = "[" * 200_000 + "]" * 200_000
        status, body = self.answered("nested tool-call arguments", lambda: self.chat({
            "messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function",
                              "function": {"name": "f", "arguments": nested}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
            "max_tokens": 4}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "messages[1].tool_calls[0].function.arguments")

        status, body = self.answered("4 MB one-word prompt", lambda: self.completion(
            {"prompt": "a" * (4 << 20), "max_tokens": 1}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "prompt", body)

        tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(60_000)]
        status, body = self.answered("60,000 tools", lambda: self.chat(
            {"messages": user, "tools": tools, "max_tokens": 4}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "tools", body)

        status, body = self.answered("2,000,000 stop token ids", lambda: self.completion(
            {"prompt": "a", "max_tokens": 4, "stop_token_ids": [1] * 2_000_000}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "stop_token_ids", body)

        status, body = self.answered("16 stop strings of 200 KB", lambda: self.completion(
            {"prompt": "a", "max_tokens": 4, "stop": ["x" * 200_000] * 16}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "stop[0]", body)

        status, body = self.answered("a schema slower to compile than the timeout", lambda: self.chat(
            {"messages": user, "max_tokens": 4, "response_format": {
                "type": "json_schema", "json_schema": {"name": "slow", "schema": SLOW_SCHEMA}}}))
        self.assertEqual(status, 400, body)
        self.assertIn("--grammar-compile-timeout", body["error"]["message"])

        pb = self.protos.inference_pb2
        status, body = self.answered("250 MB gRPC Generate without a key", lambda: self.grpc_call(
            lambda stub: list(stub.Generate(pb.GenerateRequest(text="a" * (250 << 20)),
                                            timeout=ANSWER_BOUND_S))))
        self.assertEqual(status, 401, body)

        status, body = self.answered("8 MB one-word gRPC Tokenize", lambda: self.grpc_call(
            lambda stub: stub.Tokenize(pb.TokenizeRequest(text="a" * (8 << 20)),
                                       timeout=ANSWER_BOUND_S,
                                       metadata=[("authorization", f"Bearer {KEY}")])))
        self.assertEqual(status, 400, body)

        # The Messages and Responses APIs and gRPC chat prompts take the same bounds.
        status, body = self.answered("60,000 tools through /v1/messages", lambda: request(
            self.address, "POST", "/v1/messages",
            {"max_tokens": 4, "messages": user,
             "tools": [{"name": f"f{i}", "input_schema": {}} for i in range(60_000)]}))
        self.assertEqual(status, 400, body)
        self.assertIn("tools", body["error"]["message"])

        status, body = self.answered("100,000 input items through /v1/responses", lambda: request(
            self.address, "POST", "/v1/responses",
            {"max_output_tokens": 4, "input": [{"role": "user", "content": "word " * 4}] * 100_000}))
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "messages", body)

        deep = "[" * 200_000 + "]" * 200_000
        status, body = self.answered("nested tool parameters in a gRPC chat", lambda: self.grpc_call(
            lambda stub: list(stub.Generate(
                pb.GenerateRequest(max_tokens=4, chat=pb.Chat(
                    messages=[pb.ChatMessage(role="user", content="Hi")],
                    tools=[pb.Tool(name="f", parameters=deep)])),
                timeout=ANSWER_BOUND_S, metadata=[("authorization", f"Bearer {KEY}")]))))
        self.assertEqual(status, 400, body)
        self.assertIn("chat.tools[0].parameters", body)

        status, body = self.answered("8 MB HTTP body without a key", lambda: request(
            self.address, "POST", "/v1/completions", b"{" + b" " * 8_000_000 + b"}", key=None))
        self.assertEqual(status, 401, body)

        stream.stopping.set()
        stream.join(timeout=30)
        self.assertIsNone(stream.error, f"the background stream failed: {stream.error}")
        growth = tpserve_cluster.rss_kib(self.coordinator) - rss_start
        print(f"background stream: {stream.chunks} chunks, longest pause "
              f"{stream.longest_pause:.2f} s; coordinator RSS {growth:+d} KiB", flush=True)
        self.assertLessEqual(stream.longest_pause, STREAM_PAUSE_BOUND_S,
                             f"the background stream paused {stream.longest_pause:.2f} s")
        self.assertEqual(self.recoveries(), recoveries)
        self.assertIsNone(self.cluster.process.poll(), "the cluster stopped")
        self.assertLess(growth, RSS_GROWTH_BOUND_KIB, f"the coordinator grew by {growth} KiB")
        status, body = self.completion({"prompt": "The capital of France is", "max_tokens": 4})
        self.assertEqual(status, 200, body)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

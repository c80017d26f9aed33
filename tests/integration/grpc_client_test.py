"""InferenceService through Python gRPC stubs generated from proto/, on a T=1 cluster: streaming
Generate, a cancelled stream whose KV blocks come back, Tokenize, ListModels, and
INVALID_ARGUMENT for impossible parameters. Chat prompts: the same conversation over gRPC and
/v1/chat/completions is the same prompt and (greedy) the same reply, tool calls included.

    grpc_client_test.py --bin-dir BUILD/bin --model MODEL.gguf [unittest args]
"""

import json
import time
import unittest
import urllib.request

import grpc

from tpserve_cluster import run_tests, start_class_grpc

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
RPC_TIMEOUT_S = 120


class GrpcClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.protos, cls.cluster, cls.channel, cls.admin_channel = start_class_grpc(cls, tp=1)
        cls.inference = cls.protos.inference_pb2_grpc.InferenceServiceStub(cls.channel)
        cls.admin = cls.protos.admin_pb2_grpc.AdminServiceStub(cls.admin_channel)

    def request(self, **fields):
        return self.protos.inference_pb2.GenerateRequest(**fields)

    def generate(self, request):
        """(token ids, text, last chunk, chunk count, seconds to the first chunk)."""
        start = time.monotonic()
        ids, text, last, chunks, first = [], "", None, 0, None
        for chunk in self.inference.Generate(request, timeout=RPC_TIMEOUT_S):
            if first is None:
                first = time.monotonic() - start
            ids += chunk.token_ids
            text += chunk.text
            last = chunk
            chunks += 1
        return ids, text, last, chunks, first

    def test_generate_streams_text_and_usage(self):
        sampling = self.protos.inference_pb2.Sampling(temperature=0)
        start = time.monotonic()
        ids, text, last, chunks, first = self.generate(
            self.request(text=PROMPT, max_tokens=16, sampling=sampling))
        print(f"Generate: {len(ids)} tokens in {chunks} chunks, first after {first:.3f} s, "
              f"all after {time.monotonic() - start:.3f} s: {text!r}")
        self.assertTrue(text)
        self.assertIn(last.finish_reason, ("stop", "length"))
        self.assertGreater(last.usage.prompt_tokens, 0)
        # The final EOS is counted but not streamed.
        self.assertIn(last.usage.completion_tokens - len(ids), (0, 1))
        self.assertLessEqual(last.usage.completion_tokens, 16)

    def test_cancel_mid_stream_frees_blocks(self):
        call = self.inference.Generate(
            self.request(text=PROMPT, max_tokens=4000, ignore_eos=True), timeout=RPC_TIMEOUT_S)
        received = 0
        for chunk in call:
            received += len(chunk.token_ids)
            if received >= 3:
                break
        during = self.admin.ClusterStatus(self.protos.admin_pb2.ClusterStatusRequest())
        print(f"streaming, {received} tokens in: {during.kv_blocks_used} KV blocks used, "
              f"{during.num_requests_running} running")
        self.assertGreater(during.kv_blocks_used, 0)
        self.assertEqual(during.num_requests_running, 1)

        call.cancel()
        cancelled = time.monotonic()
        with self.assertRaises(grpc.RpcError):
            for _ in call:
                pass
        self.assertEqual(call.code(), grpc.StatusCode.CANCELLED)
        status = None
        while time.monotonic() - cancelled < 10:
            status = self.admin.ClusterStatus(self.protos.admin_pb2.ClusterStatusRequest())
            if status.kv_blocks_used == 0 and status.num_requests_running == 0:
                break
            time.sleep(0.05)
        print(f"after cancel: {status.kv_blocks_used} KV blocks used, "
              f"{status.num_requests_running} running, after "
              f"{time.monotonic() - cancelled:.2f} s")
        self.assertEqual(status.kv_blocks_used, 0)
        self.assertEqual(status.num_requests_running, 0)

    def test_server_reflection_lists_the_services(self):
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        def listed(channel):
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            replies = stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
            return {s.name for reply in replies for s in reply.list_services_response.service}

        client, admin = listed(self.channel), listed(self.admin_channel)
        print("reflection:", sorted(client), "admin port:", sorted(admin))
        self.assertIn("tpserve.v1.InferenceService", client)
        self.assertNotIn("tpserve.v1.AdminService", client)
        self.assertIn("tpserve.v1.AdminService", admin)
        self.assertNotIn("tpserve.v1.InferenceService", admin)

    def test_tokenize_and_list_models(self):
        pb = self.protos.inference_pb2
        models = self.inference.ListModels(pb.ListModelsRequest(), timeout=10).models
        print("ListModels:", [(m.id, m.context_length, m.vocab_size) for m in models])
        self.assertEqual(len(models), 1)
        model = models[0]
        self.assertTrue(model.id)
        self.assertGreater(model.context_length, 0)
        self.assertGreater(model.vocab_size, 0)
        with urllib.request.urlopen(self.cluster.http_url + "/v1/models", timeout=10) as reply:
            http_models = [m["id"] for m in json.load(reply)["data"]]
        self.assertEqual(http_models, [model.id], "both APIs name the model alike")

        ids = list(self.inference.Tokenize(pb.TokenizeRequest(text=PROMPT), timeout=10).token_ids)
        print(f"Tokenize: {len(ids)} ids, first {ids[:8]}")
        self.assertTrue(ids)
        self.assertTrue(all(0 <= i < model.vocab_size for i in ids))
        # Tokenize gives the ids Generate sees: prompting with them is prompting with the text.
        greedy = pb.Sampling(temperature=0)
        from_text = self.generate(self.request(text=PROMPT, max_tokens=8, sampling=greedy))
        from_ids = self.generate(self.request(token_ids=pb.TokenIds(ids=ids), max_tokens=8,
                                              sampling=greedy))
        self.assertEqual(from_text[2].usage.prompt_tokens, len(ids))
        self.assertEqual(from_text[0], from_ids[0])

    def test_invalid_argument(self):
        pb = self.protos.inference_pb2
        bad = {
            "top_p 2": self.request(text=PROMPT, max_tokens=4, sampling=pb.Sampling(top_p=2)),
            "empty prompt": self.request(text="", max_tokens=4),
            "n 17": self.request(text=PROMPT, max_tokens=4, n=17),
            "empty stop string": self.request(text=PROMPT, max_tokens=4, stop=[""]),
        }
        for name, request in bad.items():
            with self.subTest(name):
                with self.assertRaises(grpc.RpcError) as raised:
                    self.generate(request)
                print(f"{name}: {raised.exception.code().name} {raised.exception.details()!r}")
                self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        health = self.inference.Health(pb.HealthRequest(), timeout=10)
        self.assertEqual(health.state, pb.HealthResponse.STATE_SERVING)

    def http_chat(self, body):
        request = urllib.request.Request(self.cluster.http_url + "/v1/chat/completions",
                                         json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=RPC_TIMEOUT_S) as reply:
            return json.load(reply)

    def test_chat_prompt_is_the_chat_endpoints(self):
        pb = self.protos.inference_pb2
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Name three colours."}]
        chat = pb.Chat(messages=[pb.ChatMessage(**m) for m in messages])
        _, text, last, _, _ = self.generate(self.request(
            chat=chat, max_tokens=24, sampling=pb.Sampling(temperature=0)))
        http = self.http_chat({"messages": messages, "max_tokens": 24, "temperature": 0})
        self.assertEqual(last.usage.prompt_tokens, http["usage"]["prompt_tokens"])
        self.assertEqual(text, http["choices"][0]["message"]["content"])

        parameters = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                      "required": ["city"]}
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        tools = [pb.Tool(name="get_weather", description="The weather in a city",
                         parameters=json.dumps(parameters))]
        calls, text, last = [], "", None
        for chunk in self.inference.Generate(self.request(
                chat=pb.Chat(messages=[pb.ChatMessage(**m) for m in ask], tools=tools,
                             tool_choice="required", no_parallel_tool_calls=True),
                max_tokens=80, sampling=pb.Sampling(temperature=0)), timeout=RPC_TIMEOUT_S):
            calls += chunk.tool_calls
            text += chunk.text
            last = chunk
        http = self.http_chat({"messages": ask, "max_tokens": 80, "temperature": 0,
                               "tool_choice": "required", "parallel_tool_calls": False,
                               "tools": [{"type": "function", "function": {
                                   "name": "get_weather", "description": "The weather in a city",
                                   "parameters": parameters}}]})
        want = http["choices"][0]["message"]["tool_calls"]
        self.assertEqual(last.finish_reason, "tool_calls")
        self.assertEqual(text, "")
        self.assertEqual([(c.name, c.arguments) for c in calls],
                         [(c["function"]["name"], c["function"]["arguments"]) for c in want])
        self.assertTrue(calls[0].id.startswith("call_"))

        for n in (-1, 2**31 - 1):
            with self.assertRaises(grpc.RpcError) as refused:
                self.generate(self.request(chat=chat, max_tokens=4, n=n))
            self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, n)
        bad = self.request(chat=pb.Chat(messages=[pb.ChatMessage(role="robot", content="x")]),
                           max_tokens=4)
        with self.assertRaises(grpc.RpcError) as raised:
            self.generate(bad)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("messages[0].role", raised.exception.details())

    def test_the_launchers_cluster_refuses_a_fake_register(self):
        """The launcher made a cluster token: a rank that does not hold it cannot join, whatever
        it sends, and the ranks that do keep serving."""
        pb = self.protos.worker_pb2
        cluster = self.protos.worker_pb2_grpc.ClusterServiceStub(self.channel)
        fake = pb.RegisterRequest(rank=0, address="127.0.0.1:1", hostname="intruder", pid=1)
        for metadata in [(), (("authorization", "Bearer wrong"),), (("authorization", ""),)]:
            with self.subTest(metadata=metadata):
                with self.assertRaises(grpc.RpcError) as raised:
                    cluster.Register(fake, metadata=metadata, timeout=10)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                with self.assertRaises(grpc.RpcError) as raised:
                    cluster.Leave(pb.LeaveRequest(rank=0), metadata=metadata, timeout=10)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        health = self.inference.Health(self.protos.inference_pb2.HealthRequest(), timeout=10)
        self.assertEqual(health.state, self.protos.inference_pb2.HealthResponse.STATE_SERVING)
        _, text, _, _, _ = self.generate(self.request(text=PROMPT, max_tokens=4))
        self.assertTrue(text)


if __name__ == "__main__":
    run_tests()

"""/tokenize and /detokenize (vLLM's shapes), /v1/models/{id} and /version on a T=1 cluster with an
API key: 1,000 strings (ASCII, accents, CJK, emoji, control characters, whitespace runs, text that
looks like special tokens) come back from /detokenize exactly as they went into /tokenize; bad
bodies get a 400 naming the field; without the key both refuse with 401; /version is the chart's
appVersion. Chat messages tokenize to the ids of the model's template rendered by jinja2 (the
independent reference), which is the prompt /v1/chat/completions runs (its prompt_tokens).

    tokenize_test.py --bin-dir BUILD/bin --model MODEL.gguf [unittest args]
"""

import json
import os
import random
import unittest
import urllib.error
import urllib.request

from tpserve_cluster import run_tests, start_class_cluster

API_KEY = "tokenize-test-key"
PIECES = ["the", " quick", "brown fox", "Ünïcödé", "naïve café", "日本語のテキスト", "中文",
          "😀🚀", "👩‍👩‍👧", "\t", "\n\n", "   ", "<|im_start|>", "</s>", "<think>", "{\"a\": 1}",
          "x" * 40, "1234567890", "ß", "Ωmega", "\u00a0", "a\u0301", "--", "...", "'s"]


def strings(n, seed=7):
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) for _ in range(n)]


class TokenizeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = start_class_cluster(cls, tp=1, extra_args=["--api-key", API_KEY])

    def post(self, path, body, key=API_KEY):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.cluster.http_url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path):
        request = urllib.request.Request(self.cluster.http_url + path,
                                         headers={"Authorization": f"Bearer {API_KEY}"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_a_thousand_strings_round_trip(self):
        status, models = self.get("/v1/models")
        self.assertEqual(status, 200)
        max_model_len = models["data"][0]["max_model_len"]
        total = 0
        for text in strings(1000):
            status, tokens = self.post("/tokenize", {"prompt": text, "add_special_tokens": False})
            self.assertEqual(status, 200, tokens)
            self.assertEqual(tokens["count"], len(tokens["tokens"]))
            self.assertEqual(tokens["max_model_len"], max_model_len)
            status, back = self.post("/detokenize", {"tokens": tokens["tokens"]})
            self.assertEqual(status, 200, back)
            self.assertEqual(back["prompt"], text)
            total += tokens["count"]
        print(f"1000 strings, {total} tokens, round-tripped")

    def test_special_tokens_and_token_strings(self):
        status, plain = self.post("/tokenize", {"prompt": "<|im_start|>user",
                                                "add_special_tokens": False,
                                                "return_token_strs": True})
        self.assertEqual(status, 200, plain)
        self.assertEqual(len(plain["token_strs"]), plain["count"])
        status, special = self.post("/tokenize", {"prompt": "<|im_start|>user"})
        self.assertEqual(status, 200, special)
        # Parsed as the special token it names, it is one token; as text, several.
        self.assertLess(special["count"], plain["count"])

    def test_bad_bodies_name_the_field(self):
        for path, body, field in [
                ("/tokenize", {"prompt": 5}, "'prompt'"),
                ("/tokenize", {}, "'prompt'"),
                ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, "add_special_tokens"),
                ("/tokenize", {"prompt": "a", "truncate": 3}, "unknown field 'truncate'"),
                ("/detokenize", {"tokens": [1, -1]}, "'tokens': -1"),
                ("/detokenize", {"tokens": [10**9]}, "'tokens'"),
                ("/detokenize", {"tokens": "1 2"}, "'tokens'"),
                ("/detokenize", b"[" * 100 + b"]" * 100, "nested"),
                ("/tokenize", b"not json", "JSON object")]:
            with self.subTest(path=path, body=body):
                status, error = self.post(path, body)
                self.assertEqual(status, 400, error)
                self.assertIn(field, error["error"]["message"])
        # The server goes on.
        self.assertEqual(self.post("/tokenize", {"prompt": "ok"})[0], 200)

    def test_without_the_key_nothing_is_tokenized(self):
        for path, body in (("/tokenize", {"prompt": "a"}), ("/detokenize", {"tokens": [1]})):
            status, error = self.post(path, body, key=None)
            self.assertEqual(status, 401, error)

    def test_chat_messages_are_the_template_jinja2_renders(self):
        import jinja2

        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Name a colour. Ünïcödé 日本"}]
        status, chat = self.post("/tokenize", {"messages": messages, "add_special_tokens": False})
        self.assertEqual(status, 200, chat)
        source = self.template()
        text = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(
            source).render(messages=messages, add_generation_prompt=True)
        # The template's text with its special tokens (and BOS where the model wants one), as a
        # completion's prompt.
        status, want = self.post("/tokenize", {"prompt": text})
        self.assertEqual(chat["tokens"], want["tokens"])
        reply = self.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1})[1]
        self.assertEqual(reply["usage"]["prompt_tokens"], chat["count"])
        status, error = self.post("/tokenize", {"messages": messages, "prompt": "a"})
        self.assertEqual(status, 400, error)
        status, error = self.post("/tokenize", {"messages": [{"role": "robot", "content": "a"}],
                                                "add_special_tokens": False})
        self.assertEqual(status, 400, error)
        self.assertIn("messages[0].role", error["error"]["message"])

    def template(self):
        """The bundled model's chat template, read from its GGUF file."""
        import sys

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from gguf_reader import Gguf

        return Gguf(self.cluster.model).metadata["tokenizer.chat_template"]

    def test_version_is_the_charts_app_version(self):
        chart = os.path.join(os.path.dirname(__file__), "..", "..", "helm", "tpserve", "Chart.yaml")
        with open(chart) as f:
            app_version = next(line.split(":", 1)[1].strip().strip('"') for line in f
                               if line.startswith("appVersion:"))
        with urllib.request.urlopen(self.cluster.http_url + "/version", timeout=10) as response:
            self.assertEqual(json.loads(response.read()), {"version": app_version})

    def test_one_model(self):
        status, models = self.get("/v1/models")
        name = models["data"][0]["id"]
        status, model = self.get(f"/v1/models/{name}")
        self.assertEqual(status, 200, model)
        self.assertEqual(model, models["data"][0])
        status, error = self.get("/v1/models/no-such-model")
        self.assertEqual(status, 404, error)
        self.assertIn("no-such-model", error["error"]["message"])


if __name__ == "__main__":
    run_tests()

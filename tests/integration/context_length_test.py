"""The context a cluster advertises is the context it serves, on T=1 clusters over HTTP:

1. With the default KV pool, /v1/models says max_model_len 8192 (SmolLM2's llama.context_length)
   and the pool the coordinator reports holds at least that many tokens (a full 8k prefill takes
   minutes on two cores, so the test reads the pool's size instead); 8,150 + 64 is refused 400,
   naming max_tokens and the numbers.
2. With --kv-cache-blocks 64 (1,024 tokens of 16), max_model_len says 1024 and 1,000 + 50 is
   refused the same way, instead of being accepted and failing for lack of blocks.

    context_length_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import re
import unittest
import urllib.error
import urllib.request

import tpserve_cluster

MODEL_CONTEXT = 8192  # SmolLM2-135M's llama.context_length
TOKEN = 28  # any ordinary token id: the prompt's content does not matter here


def http(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def completion(prompt_tokens, max_tokens):
    return {"prompt": [TOKEN] * prompt_tokens, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}


class ContextLengthTest(unittest.TestCase):
    def serve(self, extra_args):
        args = tpserve_cluster.parsed_args()
        self.cluster = tpserve_cluster.Cluster(args.bin_dir, args.model, tp=1,
                                               extra_args=extra_args)
        self.cluster.__enter__()
        self.addCleanup(self.cluster.stop)
        return self.cluster.http_url

    def pool_tokens(self):
        with open(self.cluster.log_path, encoding="utf-8") as f:
            match = re.search(r"serving: \d+ ranks, (\d+) KV blocks of (\d+) tokens", f.read())
        self.assertIsNotNone(match, "the coordinator did not log its KV pool")
        return int(match.group(1)) * int(match.group(2))

    def max_model_len(self, url):
        status, body = http(url + "/v1/models")
        self.assertEqual(status, 200, body)
        return body["data"][0]["max_model_len"]

    def assertRefused(self, url, prompt_tokens, max_tokens, context):
        status, body = http(url + "/v1/completions", completion(prompt_tokens, max_tokens))
        self.assertEqual(status, 400, body)
        error = body["error"]
        self.assertEqual(error["param"], "max_tokens", error)
        for number in (prompt_tokens, max_tokens, context):
            self.assertIn(str(number), error["message"])

    def test_default_pool_holds_a_full_context(self):
        url = self.serve([])
        self.assertEqual(self.max_model_len(url), MODEL_CONTEXT)
        self.assertGreaterEqual(self.pool_tokens(), MODEL_CONTEXT)
        self.assertRefused(url, 8150, 64, MODEL_CONTEXT)

    def test_small_pool_advertises_what_fits(self):
        url = self.serve(["--kv-cache-blocks", "64"])
        self.assertEqual(self.max_model_len(url), 1024)
        self.assertEqual(self.pool_tokens(), 1024)
        self.assertRefused(url, 1000, 50, 1024)
        status, body = http(url + "/v1/completions", completion(900, 50))
        self.assertEqual(status, 200, body)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

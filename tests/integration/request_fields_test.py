"""No request field is ignored silently: against a tp 1 cluster (real processes on 127.0.0.1,
ports chosen at run time), every field the README's "Every request field" table refuses gets 400
naming it, with the value the table gives; and each implemented field does what it says:

- min_tokens holds back the stop string and the end of the turn until that many tokens;
- echo returns the prompt, and its log-probabilities are the log-softmax of the gRPC Score path's
  logits (computed here with NumPy); prompt_logprobs carries the same numbers in vLLM's form;
- allowed_token_ids draws only those tokens; bad_words never writes the word;
- include_stop_str_in_output keeps the stop string; skip_special_tokens drops a control token's
  text;
- continue_final_message continues the final message, rendered as Python's jinja2 renders the
  model's template and cut after its content;
- a key no API defines changes nothing and the log names it.

    request_fields_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import os
import re
import unittest
import urllib.error
import urllib.request

import numpy as np

import tpserve_cluster

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
PROMPT = "The capital of France is"


def refused_rows():
    """(field, endpoints, value) of every README row that refuses a field with a given value."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("#### Every request field"):text.index("### Structured output")]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[2].startswith("refused") or not cells[3]:
            continue
        for field in re.findall(r"`([^`]+)`", cells[0]):
            rows.append((field, cells[1], json.loads(cells[3].strip("`"))))
    return rows


class RequestFieldsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-fields-")
        cls.cluster = tpserve_cluster.start_class_cluster(cls, tp=1)
        import grpc

        cls.channel = grpc.insecure_channel(cls.cluster.grpc_address)
        cls.addClassCleanup(cls.channel.close)
        cls.inference = cls.protos.inference_pb2_grpc.InferenceServiceStub(cls.channel)

    def post(self, path, body):
        request = urllib.request.Request(self.cluster.http_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def complete(self, **body):
        status, reply = self.post("/v1/completions", {"prompt": PROMPT, "temperature": 0, **body})
        self.assertEqual(status, 200, reply)
        return reply["choices"][0], reply["usage"]

    def tokenize(self, text):
        pb = self.protos.inference_pb2
        return list(self.inference.Tokenize(pb.TokenizeRequest(text=text), timeout=30).token_ids)

    def test_every_refused_field_is_a_400_naming_it(self):
        rows = refused_rows()
        self.assertGreater(len(rows), 40)
        for field, endpoints, value in rows:
            paths = {"completions": ["/v1/completions"], "chat": ["/v1/chat/completions"],
                     "both": ["/v1/completions", "/v1/chat/completions"]}[endpoints]
            for path in paths:
                body = {"max_tokens": 2, field: value}
                if path == "/v1/completions":
                    body["prompt"] = PROMPT
                else:
                    body["messages"] = [{"role": "user", "content": "Hi"}]
                status, reply = self.post(path, body)
                self.assertEqual(status, 400, f"{path} {field}={value!r}: {reply}")
                self.assertEqual(reply["error"]["param"], field, f"{path} {field}: {reply}")

    def test_nested_fields_are_refused_too(self):
        for field, extra in [("structured_outputs.structural_tag",
                              {"structured_outputs": {"structural_tag": "{}"}}),
                             ("stream_options.continuous_usage_stats",
                              {"stream": True, "stream_options": {"continuous_usage_stats": True}})]:
            status, reply = self.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2, **extra})
            self.assertEqual(status, 400, reply)
            self.assertEqual(reply["error"]["param"], field, reply)

    def test_min_tokens_holds_back_stop_strings_and_the_end(self):
        free, _ = self.complete(max_tokens=24)
        first_word = free["text"].split()[0]
        stopped, usage = self.complete(max_tokens=24, stop=[first_word])
        self.assertLess(usage["completion_tokens"], 4, stopped)
        held, usage = self.complete(max_tokens=24, stop=[first_word], min_tokens=12)
        self.assertGreaterEqual(usage["completion_tokens"], 12, held)
        self.assertIn(first_word, held["text"])
        # The chat turn ends with the end-of-turn token soon; min_tokens holds it back.
        status, reply = self.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Say hi."}], "temperature": 0,
            "max_tokens": 200})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["choices"][0]["finish_reason"], "stop")
        natural = reply["usage"]["completion_tokens"]
        status, reply = self.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Say hi."}], "temperature": 0,
            "max_tokens": 200, "min_tokens": natural + 20})
        self.assertEqual(status, 200, reply)
        self.assertGreaterEqual(reply["usage"]["completion_tokens"], natural + 20)

    def test_echo_logprobs_are_the_score_paths(self):
        ids = self.tokenize(PROMPT)
        choice, usage = self.complete(max_tokens=3, echo=True, logprobs=2)
        self.assertTrue(choice["text"].startswith(PROMPT), choice["text"])
        self.assertEqual(usage["prompt_tokens"], len(ids))
        logprobs = choice["logprobs"]
        self.assertEqual(len(logprobs["tokens"]), len(ids) + 3)
        self.assertIsNone(logprobs["token_logprobs"][0])
        self.assertIsNone(logprobs["top_logprobs"][0])
        logits = tpserve_cluster.score_logits(self.protos, self.cluster, ids)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        expected = [log_softmax[i - 1, ids[i]] for i in range(1, len(ids))]
        np.testing.assert_allclose(logprobs["token_logprobs"][1:len(ids)], expected, atol=2e-4)
        for i in range(1, len(ids)):
            self.assertGreaterEqual(len(logprobs["top_logprobs"][i]), 2)
            best = max(logprobs["top_logprobs"][i].values())
            self.assertAlmostEqual(best, float(log_softmax[i - 1].max()), delta=2e-4)

        choice, _ = self.complete(max_tokens=1, prompt_logprobs=1)
        self.assertFalse(choice["text"].startswith(PROMPT))
        prompt_logprobs = choice["prompt_logprobs"]
        self.assertEqual(len(prompt_logprobs), len(ids))
        self.assertIsNone(prompt_logprobs[0])
        for i in range(1, len(ids)):
            entry = prompt_logprobs[i][str(ids[i])]
            self.assertAlmostEqual(entry["logprob"], float(log_softmax[i - 1, ids[i]]), delta=2e-4)
            self.assertEqual(entry["rank"], 1 + int((log_softmax[i - 1] > log_softmax[i - 1, ids[i]]).sum()))

    def test_allowed_token_ids_and_bad_words(self):
        allowed = self.tokenize("a") + self.tokenize("b")
        allowed = [i for i in allowed if i not in self.tokenize("")]
        choice, usage = self.complete(max_tokens=8, allowed_token_ids=allowed, ignore_eos=True)
        self.assertEqual(usage["completion_tokens"], 8)
        self.assertTrue(set(choice["text"]) <= {"a", "b"}, choice["text"])

        free, _ = self.complete(max_tokens=12)
        word = free["text"].split()[0].strip(".,")
        banned, _ = self.complete(max_tokens=12, bad_words=[word])
        self.assertNotIn(word, banned["text"])

    def test_logit_bias(self):
        free, _ = self.complete(max_tokens=1, logprobs=1)
        greedy = free["logprobs"]["tokens"][0]
        greedy_id = self.tokenize(greedy)
        self.assertEqual(len(greedy_id), 1, greedy)
        pushed, _ = self.complete(max_tokens=1, logprobs=0,
                                  logit_bias={str(greedy_id[0]): -100})
        self.assertNotEqual(pushed["logprobs"]["tokens"][0], greedy)
        # The log-probability reported is still the raw logits'.
        self.assertLess(pushed["logprobs"]["token_logprobs"][0],
                        free["logprobs"]["token_logprobs"][0])
        word = " banana"
        forced_ids = self.tokenize(word)
        self.assertEqual(len(forced_ids), 1, forced_ids)
        forced, _ = self.complete(max_tokens=4, ignore_eos=True,
                                  logit_bias={str(forced_ids[0]): 100})
        self.assertEqual(forced["text"], word * 4)
        for bad in [{"banana": 1}, {str(forced_ids[0]): 101}, {"99999999": 1}]:
            status, reply = self.post("/v1/completions", {"prompt": PROMPT, "logit_bias": bad})
            self.assertEqual((status, reply["error"]["param"]), (400, "logit_bias"), bad)

    def test_include_stop_str_and_skip_special_tokens(self):
        free, _ = self.complete(max_tokens=16)
        stop = free["text"].split()[1]
        cut, _ = self.complete(max_tokens=16, stop=[stop])
        kept, _ = self.complete(max_tokens=16, stop=[stop], include_stop_str_in_output=True)
        self.assertEqual(kept["text"], cut["text"] + stop)
        # A control token drawn twice: no text by default, its text when asked.
        special = self.tokenize("<|im_start|>")
        self.assertEqual(len(special), 1, special)
        quiet, _ = self.complete(max_tokens=2, allowed_token_ids=special, ignore_eos=True)
        self.assertEqual(quiet["text"], "")
        loud, _ = self.complete(max_tokens=2, allowed_token_ids=special, ignore_eos=True,
                                skip_special_tokens=False)
        self.assertEqual(loud["text"], "<|im_start|><|im_start|>")

    def test_continue_final_message_is_the_template_cut_after_it(self):
        import jinja2

        messages = [{"role": "user", "content": "What is the capital of France?"},
                    {"role": "assistant", "content": "The capital of France is"}]
        status, reply = self.post("/v1/chat/completions", {
            "messages": messages, "temperature": 0, "max_tokens": 6,
            "continue_final_message": True, "add_generation_prompt": False})
        self.assertEqual(status, 200, reply)
        source = gguf_chat_template(self.args.model)
        rendered = jinja2.Environment().from_string(source).render(
            messages=messages, add_generation_prompt=False, bos_token="", eos_token="")
        cut = rendered[:rendered.rindex(messages[-1]["content"]) + len(messages[-1]["content"])]
        self.assertEqual(reply["usage"]["prompt_tokens"], len(self.tokenize(cut)))
        as_completion, _ = self.complete(prompt=self.tokenize(cut), max_tokens=6)
        self.assertEqual(reply["choices"][0]["message"]["content"], as_completion["text"])
        status, reply = self.post("/v1/chat/completions", {
            "messages": messages, "max_tokens": 2, "continue_final_message": True,
            "add_generation_prompt": True})
        self.assertEqual(status, 400, reply)
        self.assertEqual(reply["error"]["param"], "continue_final_message")

    def test_unknown_keys_change_nothing_and_are_logged(self):
        plain, _ = self.complete(max_tokens=6)
        odd, _ = self.complete(max_tokens=6, not_a_field_anywhere=1)
        self.assertEqual(plain["text"], odd["text"])
        with open(self.cluster.log_path, encoding="utf-8", errors="replace") as f:
            self.assertIn("change nothing: not_a_field_anywhere", f.read())


def gguf_chat_template(path):
    """tokenizer.chat_template of a GGUF file, read with the tests' own GGUF reader."""
    import gguf_reader

    return gguf_reader.Gguf(path).metadata["tokenizer.chat_template"]


if __name__ == "__main__":
    tpserve_cluster.run_tests()

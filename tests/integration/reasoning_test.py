"""reasoning: a reasoning model's thinking as reasoning_content, through the official openai
client.

tpserve-mkmodel writes a random-weight Llama with SmolLM2's vocabulary; the coordinator serves it
at tp 2 with DeepSeek-R1-Distill-Llama-8B's real chat template (from llama.cpp's template corpus),
whose generation prompt ends in "<think>\\n", so --reasoning-parser auto picks deepseek_r1 and the
output is thinking until "</think>". Random weights never close the thinking on their own: a
thinking_token_budget makes the grammar close it after that many tokens, and the request's
guided_regex (or tools) applies to what follows. Checked:
- message.reasoning_content holds the thinking (no tag in it) and message.content the answer,
  which fully matches the regex; the tokens add up (the thinking within its budget);
- streamed, the deltas' reasoning_content and content add up to the same message (same seed);
- include_reasoning false drops the thinking and keeps the answer;
- without a budget or a constraint, thinking cut off by max_tokens is all reasoning;
- tool_choice required after the thinking: a well-formed call, the thinking beside it.

    reasoning_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import os
import re
import subprocess
import unittest

import tpserve_cluster

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build-deps",
                        "llama_cpp_python-0.3.36", "vendor", "llama.cpp", "models", "templates",
                        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")
ASK = [{"role": "user", "content": "What is two plus two?"}]
ANSWER = "[a-z]{3,8}"
BUDGET = 6


class Reasoning(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import openai

        tpserve_cluster.set_up_scratch(cls, "tpserve-reasoning-")
        model = os.path.join(cls.tmp.name, "r1-shaped.gguf")
        subprocess.run([os.path.join(cls.args.bin_dir, "tpserve-mkmodel"), "--output", model,
                        "--vocab-from", cls.args.model, "--layers", "2", "--hidden", "128",
                        "--heads", "4", "--kv-heads", "2", "--ffn", "256", "--context", "1024",
                        "--seed", "11"], check=True, capture_output=True, timeout=120)
        cluster = tpserve_cluster.Cluster(cls.args.bin_dir, model, tp=2,
                                          extra_args=["--chat-template", TEMPLATE])
        cluster.__enter__()
        cls.addClassCleanup(cluster.stop)
        cls.cluster = cluster
        with open(cluster.log_path, encoding="utf-8", errors="replace") as f:
            assert "reasoning parser deepseek_r1" in f.read(), "auto did not pick deepseek_r1"
        cls.client = openai.OpenAI(base_url=cluster.http_url + "/v1", api_key="unused",
                                   max_retries=0)

    def tokens(self, text):
        return len(tpserve_cluster.post_json(self.cluster, "/tokenize",
                                             {"prompt": text, "add_special_tokens": False})["tokens"])

    def ask(self, **extra):
        body = {"thinking_token_budget": BUDGET, "guided_regex": ANSWER}
        body.update(extra.pop("extra_body", {}))
        return self.client.chat.completions.create(model=self.cluster_model(), messages=ASK,
                                                   max_tokens=40, seed=5, temperature=1.0,
                                                   extra_body=body, **extra)

    def cluster_model(self):
        return self.client.models.list().data[0].id

    def test_thinking_then_the_constrained_answer(self):
        reply = self.ask()
        message = reply.choices[0].message
        reasoning = message.reasoning_content
        self.assertTrue(reasoning, message)
        self.assertNotIn("</think>", reasoning)
        self.assertNotIn("<think>", reasoning)
        self.assertRegex(message.content, "^" + ANSWER + "$")
        self.assertEqual(reply.choices[0].finish_reason, "stop")
        # Thinking (within its budget), the closing tag the grammar forced, the answer, the end.
        used = reply.usage.completion_tokens
        self.assertLessEqual(used, BUDGET + self.tokens("</think>") + self.tokens(message.content) + 1)
        self.assertGreater(used, self.tokens(message.content))

    def test_streamed_deltas_add_up_to_the_message(self):
        whole = self.ask().choices[0].message
        reasoning, content = "", ""
        for chunk in self.ask(stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            part = getattr(delta, "reasoning_content", None) or ""
            self.assertNotIn("</think>", part)
            self.assertNotIn("</think>", delta.content or "")
            reasoning += part
            content += delta.content or ""
        self.assertEqual(reasoning, whole.reasoning_content)
        self.assertEqual(content, whole.content)

    def test_include_reasoning_false_drops_the_thinking(self):
        whole = self.ask().choices[0].message
        hidden = self.ask(extra_body={"include_reasoning": False}).choices[0].message
        self.assertIsNone(getattr(hidden, "reasoning_content", None))
        self.assertEqual(hidden.content, whole.content)

    def test_unbounded_thinking_cut_by_max_tokens_is_all_reasoning(self):
        reply = self.client.chat.completions.create(model=self.cluster_model(), messages=ASK,
                                                    max_tokens=12, seed=3)
        message = reply.choices[0].message
        self.assertEqual(reply.choices[0].finish_reason, "length")
        self.assertTrue(message.reasoning_content)
        self.assertEqual(message.content, "")

    def test_tool_call_after_the_thinking(self):
        tool = {"type": "function", "function": {
            "name": "add", "parameters": {"type": "object", "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 99},
                "b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}}}
        reply = self.client.chat.completions.create(
            model=self.cluster_model(), messages=ASK, max_tokens=80, seed=2, tools=[tool],
            tool_choice="required", parallel_tool_calls=False,
            extra_body={"thinking_token_budget": BUDGET})
        message = reply.choices[0].message
        self.assertTrue(message.reasoning_content)
        self.assertEqual(reply.choices[0].finish_reason, "tool_calls", message)
        self.assertEqual(len(message.tool_calls), 1)
        call = message.tool_calls[0].function
        self.assertEqual(call.name, "add")
        self.assertRegex(call.arguments, r'^\{"a": ?\d+, ?"b": ?\d+\}$')


if __name__ == "__main__":
    tpserve_cluster.run_tests()

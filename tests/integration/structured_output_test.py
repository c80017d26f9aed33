"""structured_output: constrained generation through the official openai client on a T=3 cluster
(real processes on 127.0.0.1, ports chosen at run time).

Ten JSON schemas (nested objects, arrays with min/max items, enums, integer ranges, string
patterns, optional fields, anyOf) sampled at temperature 1.0: every answer parses and validates
with Python's `jsonschema` (independent of xgrammar and of tpserve). Regexes (ISO dates, phone
numbers) and choices: every answer matches. An unconstrained greedy request running in the same
batches as constrained ones gives the same text as alone. All of it twice: with jump-forward
decoding (the default; /metrics must count forced tokens) and with --no-jump-forward (none).

    structured_output_test.py --bin-dir BUILD/bin --model MODEL.gguf

TPSERVE_STRUCTURED_SAMPLES (default 4; the issue's full form is 20) samples per schema.
"""

import concurrent.futures
import json
import os
import re
import unittest
import urllib.request

import tpserve_cluster

SAMPLES = int(os.environ.get("TPSERVE_STRUCTURED_SAMPLES", "4"))
NAME = {"type": "string", "minLength": 1, "maxLength": 24}
SCHEMAS = [
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0,
                                                             "maximum": 120}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"city": NAME, "country": NAME,
                                      "population": {"type": "integer", "minimum": 1,
                                                     "maximum": 10000000000}},
     "required": ["city", "country"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "minItems": 2,
                                               "maxItems": 4}},
     "required": ["tags"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                      "shade": {"type": "string", "enum": ["light", "dark"]}},
     "required": ["color", "shade"]},
    {"type": "object", "properties": {"owner": {"type": "object", "properties": {
        "name": NAME, "address": {"type": "object", "properties": {
            "street": NAME, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "zip"]}}, "required": ["name", "address"]}},
     "required": ["owner"]},
    {"type": "object", "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 0,
                                                        "maximum": 999}, NAME]},
                                      "ok": {"type": "boolean"}},
     "required": ["id", "ok"]},
    {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                                      "price": {"type": "number", "minimum": 0, "maximum": 1000}},
     "required": ["sku", "price"]},
    {"type": "object", "properties": {"title": NAME, "subtitle": NAME,
                                      "year": {"type": "integer", "minimum": 1900,
                                               "maximum": 2100}},
     "required": ["title"]},
    {"type": "array", "items": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -10, "maximum": 10},
        "y": {"type": "integer", "minimum": -10, "maximum": 10}}, "required": ["x", "y"]},
     "minItems": 1, "maxItems": 3},
    {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                      "confidence": {"type": "number", "minimum": 0,
                                                     "maximum": 1},
                                      "reasons": {"type": "array", "items": NAME,
                                                  "maxItems": 2}},
     "required": ["answer", "confidence"]},
]
REGEXES = [r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
           r"\(?[0-9]{3}\)? ?[0-9]{3}-[0-9]{4}"]
CHOICES = ["positive", "negative", "neutral"]


def jump_forward_tokens(cluster):
    with urllib.request.urlopen(cluster.http_url + "/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return int(re.search(r"^tpserve:jump_forward_tokens_total\{[^}]*\} (\d+)$", text,
                         re.M).group(1))


class StructuredOutput(unittest.TestCase):
    EXTRA_ARGS = ()

    @classmethod
    def setUpClass(cls):
        import openai

        tpserve_cluster.set_up_scratch(cls, "tpserve-structured-")
        cls.cluster = tpserve_cluster.start_class_cluster(cls, tp=3, extra_args=cls.EXTRA_ARGS)
        cls.client = openai.OpenAI(base_url=cls.cluster.http_url + "/v1", api_key="unused",
                                   max_retries=0, timeout=300)

    def samples(self, content, seed, **fields):
        """SAMPLES choices, in requests of at most 16 (the server's n limit)."""
        choices = []
        while len(choices) < SAMPLES:
            n = min(16, SAMPLES - len(choices))
            choices += self.chat(content, n=n, seed=seed + len(choices), **fields).choices
        return choices

    def chat(self, content, **fields):
        return self.client.chat.completions.create(
            model=self.client.models.list().data[0].id,
            messages=[{"role": "user", "content": content}], **fields)

    def test_schemas_validate(self):
        import jsonschema

        for i, schema in enumerate(SCHEMAS):
            choices = self.samples("Answer in JSON.", 1000 * i, temperature=1.0, max_tokens=400,
                                   response_format={"type": "json_schema", "json_schema": {
                                       "name": "answer_%d" % i, "schema": schema,
                                       "strict": True}})
            self.assertEqual(len(choices), SAMPLES)
            for choice in choices:
                text = choice.message.content
                self.assertEqual(choice.finish_reason, "stop", "schema %d: %r" % (i, text))
                jsonschema.validate(json.loads(text), schema)

    def test_json_object(self):
        # Free-form JSON from a 135M model can nest on for thousands of tokens at any temperature
        # that samples: greedy answers to prompts that ask for a small object, and the samplers
        # bounded by the schemas above.
        for prompt in ["Give a JSON object with the name and color of a cat.",
                       "Return a JSON object with the keys city and country for Paris.",
                       "Describe a book as a JSON object with a title and an author."]:
            choice = self.chat(prompt, temperature=0, max_tokens=300,
                               response_format={"type": "json_object"}).choices[0]
            self.assertEqual(choice.finish_reason, "stop", choice.message.content)
            self.assertIsInstance(json.loads(choice.message.content), dict)

    def test_regex_and_choice(self):
        for regex in REGEXES:
            reply = self.client.completions.create(
                model=self.client.models.list().data[0].id, prompt="Write one:", n=min(SAMPLES, 16),
                temperature=1.0, seed=5, max_tokens=40, extra_body={"guided_regex": regex})
            for choice in reply.choices:
                self.assertRegex(choice.text, "^(%s)$" % regex)
        for choice in self.samples("Is 'I love it' positive?", 9, temperature=1.0, max_tokens=10,
                                   extra_body={"guided_choice": CHOICES}):
            self.assertIn(choice.message.content, CHOICES)

    def test_unconstrained_greedy_is_the_same_beside_constrained(self):
        model = self.client.models.list().data[0].id

        def greedy():
            return self.client.completions.create(model=model, prompt="The tallest mountain is",
                                                  max_tokens=32, temperature=0).choices[0].text

        alone = greedy()
        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
            constrained = [pool.submit(self.chat, "Answer in JSON.", temperature=1.0, seed=s,
                                       max_tokens=200, response_format={
                                           "type": "json_schema", "json_schema": {
                                               "name": "a", "schema": SCHEMAS[0]}})
                           for s in range(4)]
            beside = pool.submit(greedy)
            for future in constrained:
                future.result()
            self.assertEqual(beside.result(), alone)

    def test_forced_keys_jump_forward(self):
        # Long fixed keys are what jump-forward appends without sampling.
        schema = {"type": "object", "properties": {
            "customer_shipping_address": NAME, "customer_billing_reference": NAME},
            "required": ["customer_shipping_address", "customer_billing_reference"],
            "additionalProperties": False}
        before = jump_forward_tokens(self.cluster)
        choice = self.chat("Answer in JSON.", temperature=1.0, seed=3, max_tokens=200,
                           response_format={"type": "json_schema", "json_schema": {
                               "name": "keys", "schema": schema, "strict": True}}).choices[0]
        self.assertEqual(choice.finish_reason, "stop", choice.message.content)
        self.assertEqual(sorted(json.loads(choice.message.content)), sorted(schema["properties"]))
        forced = jump_forward_tokens(self.cluster) - before
        if self.EXTRA_ARGS:
            self.assertEqual(forced, 0)
        else:
            # Both keys' text but the last token of each forced run (left to sampling).
            self.assertGreaterEqual(forced, 6)


class StructuredOutputWithoutJumpForward(StructuredOutput):
    EXTRA_ARGS = ("--no-jump-forward",)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

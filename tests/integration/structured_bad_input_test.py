"""structured_bad_input: malformed or unsupported constraints, and tool requests (unknown or
badly named functions, parameters with a keyword that would not be enforced, a forced call
without tools, tools beside response_format), are refused with 400 naming the field (or the
schema keyword) within 5 s, and the server serves a valid constrained request right after (real processes on 127.0.0.1, ports chosen at run time).

    structured_bad_input_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import time
import unittest
import urllib.error
import urllib.request

import tpserve_cluster

BOUND_S = 5.0
CASES = [
    # (body fields, param, words in the message)
    ({"response_format": {"type": "yaml"}}, "response_format.type", "yaml"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema", "required"),
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": {"type": "frobnicate"}}}},
     "response_format.json_schema.schema", "frobnicate"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "integer", "multipleOf": 3}}}},
     "response_format.json_schema.schema", "multipleOf"),
    ({"guided_json": {"type": "array", "uniqueItems": True}}, "guided_json", "uniqueItems"),
    ({"guided_json": {"type": "string", "format": "credit-card"}}, "guided_json", "credit-card"),
    ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ({"guided_regex": "[a-"}, "guided_regex", "Unclosed"),
    ({"guided_grammar": "root ::= (("}, "guided_grammar", ""),
    ({"guided_choice": []}, "guided_choice", "empty"),
    ({"guided_choice": ["a", 3]}, "guided_choice[1]", "string"),
    ({"guided_regex": "a" * 70000}, "guided_regex", "at most"),
    ({"guided_regex": "[0-9]+", "guided_choice": ["a"]}, "guided_choice", "combined"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex",
     "combined"),
    ({"structured_outputs": {"json": 5}}, "structured_outputs.json", "schema"),
]

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# Tool calling on /v1/chat/completions: (body fields, param, words in the message).
TOOL_CASES = [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "tool_choice.function.name", "no function"),
    ({"tool_choice": "required"}, "tool_choice", "no tools"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", "required"),
    ({"tools": [{"type": "function", "function": {"name": "get weather!"}}]},
     "tools[0].function.name", "letters"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "already"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}]},
     "tools[0].function.parameters", "multipleOf"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "none"}}]},
     "tools[0].function.parameters", "object"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "response_format",
     "combined with tools"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "boolean"),
]


def post(url, body):
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


class StructuredBadInput(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-structured-bad-")
        cls.cluster = tpserve_cluster.start_class_cluster(cls, tp=1)

    def test_each_bad_input_is_named_and_the_server_serves_on(self):
        url = self.cluster.http_url + "/v1/completions"
        for fields, param, words in CASES:
            start = time.monotonic()
            status, body = post(url, dict({"prompt": "x", "max_tokens": 4}, **fields))
            elapsed = time.monotonic() - start
            self.assertEqual(status, 400, (fields, body))
            self.assertEqual(body["error"]["param"], param, (fields, body))
            self.assertIn(words, body["error"]["message"], fields)
            self.assertNotIn("build-deps", body["error"]["message"])
            self.assertLess(elapsed, BOUND_S, fields)
            status, body = post(url, {"prompt": "Pick:", "max_tokens": 4,
                                      "guided_choice": ["left", "right"]})
            self.assertEqual(status, 200, body)
            self.assertIn(body["choices"][0]["text"], ["left", "right"])

    def test_each_bad_tool_request_is_named_and_the_server_serves_on(self):
        url = self.cluster.http_url + "/v1/chat/completions"
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        for fields, param, words in TOOL_CASES:
            start = time.monotonic()
            status, body = post(url, dict({"messages": messages, "max_tokens": 4}, **fields))
            self.assertEqual(status, 400, (fields, body))
            self.assertEqual(body["error"]["param"], param, (fields, body))
            self.assertIn(words, body["error"]["message"], fields)
            self.assertLess(time.monotonic() - start, BOUND_S, fields)
            # Greedy, with room for the call: a sampled one may run past a short max_tokens.
            status, body = post(url, {"messages": messages, "max_tokens": 100, "temperature": 0,
                                      "tools": [WEATHER], "tool_choice": "required"})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
                             "get_weather")


if __name__ == "__main__":
    tpserve_cluster.run_tests()

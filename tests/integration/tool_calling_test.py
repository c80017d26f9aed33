"""tool_calling: OpenAI tool calling through the official openai client on a T=3 cluster of the
bundled model (real processes on 127.0.0.1, ports chosen at run time).

SmolLM2's chat template does not render tools, so the server describes them in the system
message and reads calls in the Hermes syntax (<tool_call>{"name", "arguments"}</tool_call>).
- tool_choice "required" and a named function: every reply is tool_calls (finish_reason
  "tool_calls", content null) whose arguments validate with Python's `jsonschema` against the
  function's parameters; with parallel_tool_calls false, sampled at temperature 1, exactly one.
- Streaming: the chunks, accumulated by the openai package's own ChatCompletionStreamState, give
  the message the non-streamed request gives (greedy, so both are the same generation).
- "auto": after two earlier turns that called get_weather, "What is the weather in Tokyo?" is
  answered with a get_weather call for Tokyo; a request no function serves is answered in text.
- A turn after a `tool` message is answered in text.

    tool_calling_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import unittest

import tpserve_cluster

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current time in a timezone",
    "parameters": {"type": "object", "properties": {
        "timezone": {"type": "string", "minLength": 1, "maxLength": 40}},
        "required": ["timezone"]}}}
TOOLS = [WEATHER, TIME]
PARAMETERS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]


def earlier_call(city, n):
    return [{"role": "user", "content": "What is the weather in %s?" % city},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_%d" % n, "type": "function", "function": {
                    "name": "get_weather",
                    "arguments": json.dumps({"city": city, "unit": "celsius"})}}]}]


class ToolCalling(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import openai

        tpserve_cluster.set_up_scratch(cls, "tpserve-tools-")
        cls.cluster = tpserve_cluster.start_class_cluster(cls, tp=3)
        cls.client = openai.OpenAI(base_url=cls.cluster.http_url + "/v1", api_key="unused",
                                   max_retries=0, timeout=300)
        cls.model = cls.client.models.list().data[0].id

    def chat(self, messages, **fields):
        fields.setdefault("max_tokens", 200)
        return self.client.chat.completions.create(model=self.model, messages=messages,
                                                   tools=TOOLS, **fields)

    def streamed(self, messages, **fields):
        from openai.lib.streaming.chat import ChatCompletionStreamState

        state = ChatCompletionStreamState()
        for chunk in self.chat(messages, stream=True, **fields):
            state.handle_chunk(chunk)
        return state.get_final_completion()

    def assert_valid_calls(self, choice, names=None):
        import jsonschema

        self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
        self.assertIsNone(choice.message.content)
        self.assertTrue(choice.message.tool_calls)
        for call in choice.message.tool_calls:
            self.assertEqual(call.type, "function")
            self.assertTrue(call.id.startswith("call_"))
            self.assertIn(call.function.name, names or PARAMETERS)
            jsonschema.validate(json.loads(call.function.arguments),
                                PARAMETERS[call.function.name])

    def test_required_calls_validate(self):
        # Sampled, a small model may go on calling for as long as it is let: one call each.
        for seed in range(4):
            reply = self.chat(ASK, tool_choice="required", parallel_tool_calls=False,
                              temperature=1.0, seed=seed)
            self.assert_valid_calls(reply.choices[0])
            self.assertEqual(len(reply.choices[0].message.tool_calls), 1)
        self.assert_valid_calls(self.chat(ASK, tool_choice="required", temperature=0).choices[0])

    def test_named_function_is_the_one_called(self):
        for seed in range(3):
            reply = self.chat(ASK, temperature=1.0, seed=seed, tool_choice={
                "type": "function", "function": {"name": "get_time"}})
            self.assert_valid_calls(reply.choices[0], names=["get_time"])
            self.assertEqual(len(reply.choices[0].message.tool_calls), 1)

    def test_streamed_deltas_accumulate_to_the_message(self):
        auto = earlier_call("Paris", 1) + earlier_call("London", 2) + [
            {"role": "user", "content": "What is the weather in Tokyo?"}]
        cases = [(ASK, {"tool_choice": "required"}),
                 (ASK, {"tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
                 (auto, {}),
                 ([{"role": "user", "content": "Write one sentence about the sea."}], {})]
        for messages, fields in cases:
            whole = self.chat(messages, temperature=0, **fields).choices[0]
            streamed = self.streamed(messages, temperature=0, **fields).choices[0]
            self.assertEqual(streamed.finish_reason, whole.finish_reason, fields)
            self.assertEqual(streamed.message.content or None, whole.message.content, fields)
            calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
            self.assertEqual(
                [(c.function.name, c.function.arguments)
                 for c in streamed.message.tool_calls or []], calls, fields)

    def test_auto_calls_when_the_conversation_asks_for_one(self):
        messages = earlier_call("Paris", 1) + earlier_call("London", 2) + [
            {"role": "user", "content": "What is the weather in Tokyo?"}]
        choice = self.chat(messages, temperature=0).choices[0]
        self.assert_valid_calls(choice, names=["get_weather"])
        self.assertEqual(json.loads(choice.message.tool_calls[0].function.arguments)["city"],
                         "Tokyo")

    def test_auto_answers_in_text_when_no_function_serves(self):
        choice = self.chat([{"role": "user", "content": "Write one sentence about the sea."}],
                           temperature=0).choices[0]
        self.assertIn(choice.finish_reason, ("stop", "length"))
        self.assertIsNone(choice.message.tool_calls)
        self.assertTrue(choice.message.content)

    def test_a_turn_after_a_tool_result(self):
        messages = earlier_call("Paris", 1) + [
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}]
        choice = self.chat(messages, tool_choice="none", temperature=0, max_tokens=60).choices[0]
        self.assertIsNone(choice.message.tool_calls)
        self.assertTrue(choice.message.content)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

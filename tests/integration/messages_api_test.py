"""messages_api: Anthropic's Messages API (/v1/messages) through Anthropic's official `anthropic`
client, unchanged, on a tp 3 cluster of the bundled model that requires an API key (which the
client sends as x-api-key).

- Text: the reply is one text block with stop_reason end_turn or max_tokens and usage; greedy, it
  is the text /v1/chat/completions gives for the same conversation (one engine path), and its
  input_tokens are the chat reply's prompt_tokens.
- Streaming: the client's own accumulator (messages.stream) gives the message the non-streamed
  request gives, from message_start, content_block_*, message_delta and message_stop events.
- stop_sequences: a reply they end has stop_reason stop_sequence and names the one that matched.
- Tool use: tool_choice any yields tool_use blocks whose input validates against the tool's
  input_schema, stop_reason tool_use; the same streamed; a tool_result turn is answered in text.
- A wrong key is a 401 (AuthenticationError); a field the API does not define, and a block this
  server does not take, are 400s naming them, in Anthropic's error shape.

    messages_api_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import unittest

import tpserve_cluster

KEY = "messages-test-key"
WEATHER = {"name": "get_weather", "description": "The current weather in a city",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "minLength": 1, "maxLength": 30},
               "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]
SEA = [{"role": "user", "content": "Write one sentence about the sea."}]


class MessagesApi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import anthropic
        import openai

        tpserve_cluster.set_up_scratch(cls, "tpserve-messages-")
        cls.cluster = tpserve_cluster.start_class_cluster(cls, tp=3, extra_args=["--api-key", KEY])
        cls.client = anthropic.Anthropic(base_url=cls.cluster.http_url, api_key=KEY,
                                         max_retries=0, timeout=300)
        cls.openai = openai.OpenAI(base_url=cls.cluster.http_url + "/v1", api_key=KEY,
                                   max_retries=0, timeout=300)
        cls.model = cls.openai.models.list().data[0].id

    # Greedy: temperature is no longer a parameter of the client's create(), so it travels as
    # extra_body, as it would from older clients.
    def create(self, messages, **fields):
        fields.setdefault("max_tokens", 60)
        fields.setdefault("extra_body", {"temperature": 0})
        return self.client.messages.create(model=self.model, messages=messages, **fields)

    def streamed(self, messages, **fields):
        fields.setdefault("max_tokens", 60)
        fields.setdefault("extra_body", {"temperature": 0})
        events = []
        with self.client.messages.stream(model=self.model, messages=messages, **fields) as stream:
            for event in stream:
                events.append(event.type)
            return stream.get_final_message(), events

    def test_text_is_what_chat_completions_gives(self):
        reply = self.create(SEA, system="You are a poet.")
        self.assertEqual(reply.type, "message")
        self.assertEqual(reply.role, "assistant")
        self.assertTrue(reply.id.startswith("msg_"))
        self.assertEqual([block.type for block in reply.content], ["text"])
        self.assertIn(reply.stop_reason, ("end_turn", "max_tokens"))
        chat = self.openai.chat.completions.create(
            model=self.model, max_tokens=60, temperature=0,
            messages=[{"role": "system", "content": "You are a poet."}] + SEA)
        self.assertEqual(reply.content[0].text, chat.choices[0].message.content)
        self.assertEqual(reply.usage.input_tokens, chat.usage.prompt_tokens)
        self.assertEqual(reply.usage.output_tokens, chat.usage.completion_tokens)
        finish = {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]
        self.assertEqual(reply.stop_reason, finish)

    def test_streamed_message_equals_the_whole_one(self):
        for fields in ({}, {"stop_sequences": ["."]}, {"max_tokens": 5}):
            whole = self.create(SEA, **fields)
            streamed, events = self.streamed(SEA, **fields)
            self.assertEqual(events[0], "message_start")
            self.assertEqual(events[-1], "message_stop")
            self.assertIn("content_block_start", events)
            self.assertIn("message_delta", events)
            self.assertEqual(streamed.content[0].text, whole.content[0].text, fields)
            self.assertEqual(streamed.stop_reason, whole.stop_reason, fields)
            self.assertEqual(streamed.usage.output_tokens, whole.usage.output_tokens, fields)
            self.assertEqual(streamed.stop_sequence, whole.stop_sequence, fields)
        # The sentence ends at its first full stop, which the reply names and leaves out.
        for message in (self.create(SEA, stop_sequences=["?", "."]),
                        self.streamed(SEA, stop_sequences=["?", "."])[0]):
            self.assertEqual(message.stop_reason, "stop_sequence", message)
            self.assertEqual(message.stop_sequence, ".", message)
            self.assertNotIn(".", message.content[0].text)

    def assert_tool_use(self, message):
        import jsonschema

        self.assertEqual(message.stop_reason, "tool_use", message)
        uses = [block for block in message.content if block.type == "tool_use"]
        self.assertTrue(uses, message)
        for use in uses:
            self.assertEqual(use.name, "get_weather")
            self.assertTrue(use.id.startswith("toolu_"))
            jsonschema.validate(use.input, WEATHER["input_schema"])
        return uses

    def test_tool_use_whole_and_streamed_then_a_tool_result(self):
        choice = {"type": "any", "disable_parallel_tool_use": True}
        whole = self.create(ASK, tools=[WEATHER], tool_choice=choice, max_tokens=120)
        uses = self.assert_tool_use(whole)
        self.assertEqual(len(uses), 1)
        streamed, _ = self.streamed(ASK, tools=[WEATHER], tool_choice=choice, max_tokens=120)
        self.assertEqual([(u.name, u.input) for u in self.assert_tool_use(streamed)],
                         [(u.name, u.input) for u in uses])
        follow = ASK + [
            {"role": "assistant", "content": [block.model_dump() for block in whole.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                          "content": "18 degrees and sunny"}]}]
        answer = self.create(follow, tools=[WEATHER], tool_choice={"type": "none"})
        self.assertEqual([block.type for block in answer.content], ["text"])
        self.assertTrue(answer.content[0].text)

    def test_refusals(self):
        import anthropic

        wrong = anthropic.Anthropic(base_url=self.cluster.http_url, api_key="wrong",
                                    max_retries=0)
        with self.assertRaises(anthropic.AuthenticationError):
            wrong.messages.create(model=self.model, messages=SEA, max_tokens=5)
        with self.assertRaises(anthropic.BadRequestError) as unknown:
            self.create(SEA, extra_body={"temperature": 0, "n": 2})
        self.assertEqual(unknown.exception.body["type"], "error")
        self.assertEqual(unknown.exception.body["error"]["type"], "invalid_request_error")
        self.assertIn("n:", unknown.exception.body["error"]["message"])
        with self.assertRaises(anthropic.BadRequestError) as image:
            self.create([{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "AAAA"}}]}])
        self.assertIn("messages[0].content[0]", image.exception.body["error"]["message"])
        with self.assertRaises(anthropic.BadRequestError) as thinking:
            self.create(SEA, thinking={"type": "enabled", "budget_tokens": 1024})
        self.assertIn("reasoning parser", thinking.exception.body["error"]["message"])


if __name__ == "__main__":
    tpserve_cluster.run_tests()

"""responses_api: OpenAI's Responses API (/v1/responses) through the official `openai` client,
unchanged, on a tp 1 cluster of the bundled model.

- Text: output_text is, greedy, what /v1/chat/completions gives for the same conversation (one
  engine path), with the same token counts; max_output_tokens reached is status incomplete.
- Streaming: the raw events run response.created ... response.completed with increasing
  sequence_numbers, and the client's own accumulator (responses.stream) gives the whole response.
- Function tools: tool_choice required yields a function_call item whose arguments validate
  against the parameters; a function_call_output sent with previous_response_id is answered.
- previous_response_id continues the stored conversation: the next prompt is the whole
  conversation (its prompt tokens are the chat request's for it); GET retrieves a stored
  response; with store false there is nothing to continue or retrieve (404).
- Built-in tools and unknown fields are 400s naming the field.

    responses_api_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import unittest

import tpserve_cluster

WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "minLength": 1, "maxLength": 30},
               "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}
SEA = "Write one sentence about the sea."


class ResponsesApi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import openai

        tpserve_cluster.set_up_scratch(cls, "tpserve-responses-")
        cls.cluster = tpserve_cluster.start_class_cluster(cls, tp=1)
        cls.client = openai.OpenAI(base_url=cls.cluster.http_url + "/v1", api_key="unused",
                                   max_retries=0, timeout=300)
        cls.model = cls.client.models.list().data[0].id

    def create(self, **fields):
        fields.setdefault("max_output_tokens", 60)
        fields.setdefault("temperature", 0)
        return self.client.responses.create(model=self.model, **fields)

    def chat(self, messages, max_tokens=60):
        return self.client.chat.completions.create(model=self.model, messages=messages,
                                                   max_tokens=max_tokens, temperature=0)

    def test_text_is_what_chat_completions_gives(self):
        response = self.create(input=SEA, instructions="You are a poet.")
        self.assertEqual(response.object, "response")
        self.assertTrue(response.id.startswith("resp_"))
        chat = self.chat([{"role": "system", "content": "You are a poet."},
                          {"role": "user", "content": SEA}])
        self.assertEqual(response.output_text, chat.choices[0].message.content)
        self.assertEqual(response.usage.input_tokens, chat.usage.prompt_tokens)
        self.assertEqual(response.usage.output_tokens, chat.usage.completion_tokens)
        self.assertEqual(response.status,
                         {"stop": "completed", "length": "incomplete"}[chat.choices[0].finish_reason])
        self.assertEqual(response.instructions, "You are a poet.")
        short = self.create(input=SEA, max_output_tokens=3)
        self.assertEqual(short.status, "incomplete")
        self.assertEqual(short.incomplete_details.reason, "max_output_tokens")

    def test_stream_events_and_the_accumulated_response(self):
        whole = self.create(input=SEA)
        types, numbers, text = [], [], ""
        for event in self.create(input=SEA, stream=True):
            types.append(event.type)
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                text += event.delta
        self.assertEqual(types[:2], ["response.created", "response.in_progress"])
        self.assertIn(types[-1], ("response.completed", "response.incomplete"))
        self.assertIn("response.output_item.added", types)
        self.assertIn("response.output_text.done", types)
        self.assertEqual(numbers, list(range(len(numbers))))
        self.assertEqual(text, whole.output_text)
        with self.client.responses.stream(model=self.model, input=SEA, max_output_tokens=60,
                                          temperature=0) as stream:
            for _ in stream:
                pass
            final = stream.get_final_response()
        self.assertEqual(final.output_text, whole.output_text)

    def test_function_call_and_its_output(self):
        import jsonschema

        for stream in (False, True):
            if stream:
                with self.client.responses.stream(model=self.model, tools=[WEATHER],
                                                  tool_choice="required", parallel_tool_calls=False,
                                                  max_output_tokens=120, temperature=0,
                                                  input="What is the weather in Paris?") as s:
                    for _ in s:
                        pass
                    response = s.get_final_response()
            else:
                response = self.create(input="What is the weather in Paris?", tools=[WEATHER],
                                       tool_choice="required", parallel_tool_calls=False,
                                       max_output_tokens=120)
            calls = [item for item in response.output if item.type == "function_call"]
            self.assertEqual(len(calls), 1, response.output)
            self.assertEqual(calls[0].name, "get_weather")
            jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
        answer = self.create(previous_response_id=response.id, tools=[WEATHER], tool_choice="none",
                             input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                     "output": "18 degrees and sunny"}])
        self.assertTrue(answer.output_text)
        self.assertEqual([item.type for item in answer.output], ["message"])

    def test_previous_response_continues_the_conversation(self):
        first = self.create(input="My name is Ada. Say hello.", max_output_tokens=20)
        second = self.create(input="What is my name?", previous_response_id=first.id)
        chat = self.chat([{"role": "user", "content": "My name is Ada. Say hello."},
                          {"role": "assistant", "content": first.output_text},
                          {"role": "user", "content": "What is my name?"}])
        self.assertEqual(second.usage.input_tokens, chat.usage.prompt_tokens)
        self.assertEqual(second.output_text, chat.choices[0].message.content)
        self.assertEqual(second.previous_response_id, first.id)
        self.assertEqual(self.client.responses.retrieve(first.id).output_text, first.output_text)

    def test_store_false_keeps_nothing(self):
        import openai

        unstored = self.create(input=SEA, store=False, max_output_tokens=5)
        with self.assertRaises(openai.NotFoundError):
            self.create(input="Again", previous_response_id=unstored.id)
        with self.assertRaises(openai.NotFoundError):
            self.client.responses.retrieve(unstored.id)

    def test_refusals(self):
        import openai

        with self.assertRaises(openai.BadRequestError) as tool:
            self.create(input=SEA, tools=[{"type": "web_search"}])
        self.assertIn("tools[0].type", str(tool.exception))
        with self.assertRaises(openai.BadRequestError) as unknown:
            self.create(input=SEA, extra_body={"n": 2})
        self.assertIn("n:", str(unknown.exception))


if __name__ == "__main__":
    tpserve_cluster.run_tests()

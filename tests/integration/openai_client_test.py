"""The OpenAI-compatible HTTP API through the official `openai` package, on a T=3 cluster: chat and
text completions, streamed and not, usage in the stream, stop strings, n, logprobs, models.

    openai_client_test.py --bin-dir BUILD/bin --model MODEL.gguf [unittest args]
"""

import re
import unittest

import openai
from openai.types import Completion, CompletionUsage, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tpserve_cluster import run_tests, start_class_cluster

MESSAGES = [{"role": "user", "content": "Describe the city of Paris in two sentences."}]
PROMPT = "The three largest cities in France are"
MAX_TOKENS = 24


def pick_stop(text):
    """A word of `text` and the text before its first occurrence, which is not empty."""
    words = [w for w in re.findall(r"[A-Za-z]{3,}", text) if text.index(w) > 0]
    if not words:
        raise AssertionError(f"no word to stop at in {text!r}")
    word = words[len(words) // 2]
    return word, text[:text.index(word)]


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = start_class_cluster(cls, tp=3)
        # No retries: a retried 5xx would hide the server's error.
        cls.client = openai.OpenAI(base_url=cls.cluster.http_url + "/v1", api_key="none",
                                   max_retries=0, timeout=300)
        cls.addClassCleanup(cls.client.close)
        cls.model = cls.client.models.list().data[0].id

    def chat(self, max_tokens=MAX_TOKENS, **params):
        return self.client.chat.completions.create(
            model=self.model, messages=MESSAGES, max_tokens=max_tokens, **params)

    def complete(self, max_tokens=MAX_TOKENS, **params):
        return self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=max_tokens, **params)

    def stream_texts(self, stream):
        """Text per choice index, finish reason per index, and the chunks, from a stream."""
        texts, finish, chunks = {}, {}, list(stream)
        for chunk in chunks:
            for choice in chunk.choices:
                piece = (choice.delta.content if isinstance(chunk, ChatCompletionChunk)
                         else choice.text)
                texts[choice.index] = texts.get(choice.index, "") + (piece or "")
                if choice.finish_reason is not None:
                    finish[choice.index] = choice.finish_reason
        return texts, finish, chunks

    def test_models(self):
        models = self.client.models.list().data
        print("models:", [(m.id, m.owned_by) for m in models])
        self.assertEqual(len(models), 1)
        self.assertIsInstance(models[0], Model)
        self.assertEqual(models[0].object, "model")

    def test_chat(self):
        reply = self.chat(temperature=0)
        self.assertIsInstance(reply, ChatCompletion)
        self.assertEqual(reply.object, "chat.completion")
        self.assertEqual(reply.model, self.model)
        choice = reply.choices[0]
        print(f"chat: {choice.message.content!r} ({choice.finish_reason}, {reply.usage})")
        self.assertEqual(choice.message.role, "assistant")
        self.assertTrue(choice.message.content)
        self.assertIn(choice.finish_reason, ("stop", "length"))
        self.assertIsInstance(reply.usage, CompletionUsage)
        self.assertGreater(reply.usage.prompt_tokens, 0)
        self.assertGreater(reply.usage.completion_tokens, 0)

        texts, finish, chunks = self.stream_texts(self.chat(temperature=0, stream=True))
        print(f"chat stream: {len(chunks)} chunks")
        for chunk in chunks:
            self.assertIsInstance(chunk, ChatCompletionChunk)
            self.assertEqual(chunk.object, "chat.completion.chunk")
            self.assertIsNone(chunk.usage)  # not asked for
        self.assertEqual(texts, {0: choice.message.content})
        self.assertEqual(finish, {0: choice.finish_reason})

    def test_completion(self):
        reply = self.complete(temperature=0)
        self.assertIsInstance(reply, Completion)
        self.assertEqual(reply.object, "text_completion")
        text = reply.choices[0].text
        print(f"completion: {text!r} ({reply.choices[0].finish_reason}, {reply.usage})")
        self.assertTrue(text)

        stream = self.complete(temperature=0, stream=True,
                               stream_options={"include_usage": True})
        texts, finish, chunks = self.stream_texts(stream)
        print(f"completion stream: {len(chunks)} chunks, last {chunks[-1]}")
        for chunk in chunks:
            self.assertIsInstance(chunk, Completion)
        self.assertEqual(texts, {0: text})
        self.assertEqual(finish, {0: reply.choices[0].finish_reason})
        for chunk in chunks[:-1]:
            self.assertIsNone(chunk.usage)
        usage = chunks[-1].usage
        self.assertIsInstance(usage, CompletionUsage)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual((usage.prompt_tokens, usage.completion_tokens),
                         (reply.usage.prompt_tokens, reply.usage.completion_tokens))

    def test_chat_usage_in_stream(self):
        chunks = list(self.chat(temperature=0, max_tokens=4, stream=True,
                                stream_options={"include_usage": True}))
        print(f"chat stream with usage: last chunk {chunks[-1]}")
        self.assertIsInstance(chunks[-1].usage, CompletionUsage)
        self.assertEqual(chunks[-1].usage.completion_tokens, 4)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))

    def test_stop_strings(self):
        greedy = self.complete(temperature=0).choices[0].text
        stop, before = pick_stop(greedy)
        reply = self.complete(temperature=0, stop=[stop])
        print(f"completion stop {stop!r}: {reply.choices[0].text!r} "
              f"({reply.choices[0].finish_reason}); without stop: {greedy!r}")
        self.assertEqual(reply.choices[0].text, before)
        self.assertEqual(reply.choices[0].finish_reason, "stop")
        texts, finish, _ = self.stream_texts(self.complete(temperature=0, stop=stop, stream=True))
        self.assertEqual(texts, {0: before})
        self.assertEqual(finish, {0: "stop"})

        greedy_chat = self.chat(temperature=0).choices[0].message.content
        stop, before = pick_stop(greedy_chat)
        choice = self.chat(temperature=0, stop=[stop, "\u00a7never\u00a7"]).choices[0]
        print(f"chat stop {stop!r}: {choice.message.content!r} ({choice.finish_reason})")
        self.assertEqual(choice.message.content, before)
        self.assertNotIn(stop, choice.message.content)
        self.assertEqual(choice.finish_reason, "stop")

    def test_n(self):
        reply = self.chat(n=2, temperature=0.8, seed=3)
        contents = [c.message.content for c in reply.choices]
        print(f"chat n=2: {contents}")
        self.assertEqual([c.index for c in reply.choices], [0, 1])
        self.assertTrue(all(contents))
        self.assertGreaterEqual(reply.usage.completion_tokens, 2)  # summed over the choices

        texts, finish, _ = self.stream_texts(
            self.complete(n=2, temperature=0.8, seed=3, stream=True))
        print(f"completion stream n=2: {texts} {finish}")
        self.assertEqual(sorted(texts), [0, 1])
        self.assertEqual(sorted(finish), [0, 1])
        self.assertTrue(all(texts.values()))

    def test_logprobs(self):
        reply = self.complete(temperature=0, max_tokens=8, logprobs=2)
        lp = reply.choices[0].logprobs
        print(f"completion logprobs: {list(zip(lp.tokens, lp.token_logprobs))}; "
              f"top: {lp.top_logprobs}")
        self.assertTrue(lp.tokens)
        self.assertEqual(len(lp.token_logprobs), len(lp.tokens))
        self.assertEqual(len(lp.top_logprobs), len(lp.tokens))
        for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertEqual(len(top), 2, top)
            self.assertLessEqual(logprob, 0)
            # Greedy: the sampled token is the most likely one.
            self.assertAlmostEqual(logprob, max(top.values()), places=4)
            self.assertIn(token, top)

        reply = self.chat(temperature=0, max_tokens=8, logprobs=True, top_logprobs=2)
        content = reply.choices[0].logprobs.content
        print("chat logprobs:",
              [(t.token, round(t.logprob, 3), [(a.token, round(a.logprob, 3))
                                               for a in t.top_logprobs]) for t in content])
        self.assertTrue(content)
        for item in content:
            self.assertEqual(len(item.top_logprobs), 2)
            self.assertEqual(item.token, item.top_logprobs[0].token)
            self.assertAlmostEqual(item.logprob, item.top_logprobs[0].logprob, places=4)
            self.assertGreaterEqual(item.top_logprobs[0].logprob, item.top_logprobs[1].logprob)


if __name__ == "__main__":
    run_tests()

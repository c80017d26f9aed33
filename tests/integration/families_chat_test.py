"""families_chat: Llama, Phi-3, Gemma 3, Qwen2 and Qwen3 models served end to end at tp 2.

tpserve-mkmodel marries each vocabulary of llama.cpp's suite (fetched by
scripts/fetch-llama-cpp-models.sh) with random weights of its family's shape: llama-spm's
32,000-token SentencePiece vocabulary on a Llama and on a Gemma 3 (with Gemma 2's template, the
corpus's Gemma one), phi-3's on a Phi-3 (fused matrices), qwen2's
151,643-token byte-level vocabulary on a
Qwen2 with q/k/v biases and on a Qwen3 (q/k norms, heads of 64 over a hidden size of 128; Qwen3
ships Qwen2's tokenizer). Each is served at tp 2 with a real chat template of the family
(Mistral-Nemo's [INST] template for the SentencePiece Llama, Phi-3.5-mini's for the Phi-3,
Qwen2.5's and Qwen3-0.6B's for the Qwen ones) through the OpenAI chat API. The rendered prompt is checked against the independent
references: jinja2 renders the template, HF's `tokenizers` (with the tokenizer.json
hf_tokenizer_families writes for the family) tokenizes the text; tpserve's gRPC Tokenize of that
text, and its /tokenize of the messages (its own rendering of the template), must both give those
ids, and the chat completion must count exactly as many prompt tokens and generate its max_tokens.
For the Qwen and Mistral templates, a tool call with tool_choice "required" comes back as a parsed
call of the function (Qwen's <tool_call> syntax, Mistral Nemo's [TOOL_CALLS][{...}] and Mistral
Small 3.2's [TOOL_CALLS]name[ARGS]{...}) whose arguments validate against its schema.
"""

import datetime
import json
import os
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit",
                                "model"))
import tpserve_cluster  # noqa: E402
from gguf_reader import Gguf  # noqa: E402
import hf_tokenizer_families_test as families  # noqa: E402

SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build-deps",
                     "llama_cpp_python-0.3.36", "vendor", "llama.cpp", "models")
MESSAGES = [{"role": "system", "content": "You answer in one word."},
            {"role": "user", "content": "What colour is the sky?"},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "And grass? 123 ünïcode"}]
MAX_TOKENS = 6
CASES = {
    "llama-spm": {"arch": "llama", "template": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                  "tokenizer": families.sentencepiece_tokenizer, "args": [], "tools": True},
    # Mistral Small 3.2's template and its [TOOL_CALLS]name[ARGS]{...} calls, on Nemo's head size.
    "mistral-small": {"vocab": "llama-spm", "arch": "llama",
                      "template": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                      "tokenizer": families.sentencepiece_tokenizer,
                      "args": ["--head-dim", "64"], "tools": True},
    "qwen2": {"arch": "qwen2", "template": "Qwen-Qwen2.5-7B-Instruct.jinja",
              "tokenizer": lambda g: families.byte_level_tokenizer(g, "qwen2"), "args": [],
              "tools": True},
    "qwen3": {"vocab": "qwen2", "arch": "qwen3", "template": "Qwen-Qwen3-0.6B.jinja",
              "tokenizer": lambda g: families.byte_level_tokenizer(g, "qwen2"),
              "args": ["--head-dim", "64"], "tools": True,
              # Thinking first would put the call after a </think> random weights never write.
              "call_fields": {"chat_template_kwargs": {"enable_thinking": False}}},
    "phi3": {"vocab": "phi-3", "arch": "phi3", "template": "microsoft-Phi-3.5-mini-instruct.jinja",
             "tokenizer": families.sentencepiece_tokenizer, "args": []},
    # The corpus holds Gemma 2's template (Gemma 3's differs in folding a system turn into the
    # first user turn; this one refuses a system role) and no Gemma SentencePiece vocabulary, so
    # llama-spm's stands in for it.
    "gemma3": {"vocab": "llama-spm", "arch": "gemma3", "template": "google-gemma-2-2b-it.jinja",
               "tokenizer": families.sentencepiece_tokenizer, "args": ["--head-dim", "64"],
               "messages": MESSAGES[1:]},
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


def render(template_path, gguf, messages):
    """The prompt as Hugging Face renders it: jinja2 with HF's settings and special tokens."""
    import jinja2

    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                                     extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    environment.globals["raise_exception"] = raise_exception
    # transformers' global for templates that write today's date (Mistral Small 3.2).
    environment.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    m = gguf.metadata
    tokens = m["tokenizer.ggml.tokens"]
    return environment.from_string(source).render(
        messages=messages, add_generation_prompt=True,
        bos_token=tokens[m["tokenizer.ggml.bos_token_id"]] if "tokenizer.ggml.bos_token_id" in m
        else "",
        eos_token=tokens[m["tokenizer.ggml.eos_token_id"]])


def post(cluster, path, body):
    request = urllib.request.Request(cluster.http_url + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        raise AssertionError("%s: %d %s" % (path, error.code, error.read().decode())) from None


class FamiliesChat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-families-chat-")

    def check(self, family):
        import grpc
        from tokenizers import Tokenizer

        case = CASES[family]
        vocab_path = os.path.join(SUITE, "ggml-vocab-%s.gguf" % case.get("vocab", family))
        self.assertTrue(os.path.exists(vocab_path),
                        "%s is missing: run scripts/fetch-llama-cpp-models.sh" % vocab_path)
        gguf = Gguf(vocab_path)
        model = os.path.join(self.tmp.name, family + ".gguf")
        subprocess.run([os.path.join(self.args.bin_dir, "tpserve-mkmodel"), "--output", model,
                        "--vocab-from", vocab_path, "--arch", case["arch"], "--layers", "2",
                        "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--ffn", "256",
                        "--context", "1024", "--seed", "7"] + case["args"],
                       check=True, capture_output=True, timeout=120)
        template = os.path.join(SUITE, "templates", case["template"])
        messages = case.get("messages", MESSAGES)
        text = render(template, gguf, messages)
        tokenizer_json = os.path.join(self.tmp.name, family + "-tokenizer.json")
        with open(tokenizer_json, "w", encoding="utf-8") as f:
            json.dump(case["tokenizer"](gguf), f, ensure_ascii=False)
        add_bos = gguf.metadata.get("tokenizer.ggml.add_bos_token",
                                    gguf.metadata["tokenizer.ggml.model"] == "llama")
        want = Tokenizer.from_file(tokenizer_json).encode(text, add_special_tokens=False).ids
        bos = gguf.metadata.get("tokenizer.ggml.bos_token_id")
        if add_bos and (not want or want[0] != bos):
            want = [bos] + want

        with tpserve_cluster.Cluster(self.args.bin_dir, model, tp=2,
                                     extra_args=["--chat-template", template]) as cluster:
            pb = self.protos.inference_pb2
            with grpc.insecure_channel(cluster.grpc_address) as channel:
                grpc.channel_ready_future(channel).result(timeout=10)
                stub = self.protos.inference_pb2_grpc.InferenceServiceStub(channel)
                got = list(stub.Tokenize(pb.TokenizeRequest(text=text), timeout=30).token_ids)
                name = stub.ListModels(pb.ListModelsRequest(), timeout=30).models[0].id
            rendered = post(cluster, "/tokenize", {"model": name, "messages": messages})["tokens"]
            chat = post(cluster, "/v1/chat/completions",
                        {"model": name, "messages": messages, "max_tokens": MAX_TOKENS,
                         "temperature": 0, "ignore_eos": True})
            call = answer = None
            if case.get("tools"):
                ask = [{"role": "user", "content": "Weather in Oslo?"}]
                fields = dict({"model": name, "max_tokens": 60, "temperature": 0,
                               "tools": [WEATHER], "parallel_tool_calls": False},
                              **case.get("call_fields", {}))
                call = post(cluster, "/v1/chat/completions",
                            dict(fields, messages=ask, tool_choice="required"))
                # The call and its result sent back, as a client does: the template must render
                # them (Mistral's demand ids of 9 letters and digits).
                message = call["choices"][0]["message"]
                calls = message.get("tool_calls") or []
                if calls:
                    answer = post(cluster, "/v1/chat/completions", dict(
                        fields, tool_choice="none", max_tokens=4, messages=ask + [
                            {"role": "assistant", "content": None, "tool_calls": calls},
                            {"role": "tool", "tool_call_id": calls[0]["id"],
                             "content": "18 degrees"}]))
        print("%s: %d prompt tokens, answer %r" % (family, len(want),
                                                  chat["choices"][0]["message"]["content"]),
              flush=True)
        self.assertEqual(got, want, "%s: tpserve and HF tokenize the rendered prompt apart"
                         % family)
        self.assertEqual(rendered, want, "%s: tpserve's template rendering differs from jinja2's"
                         % family)
        self.assertEqual(chat["usage"]["prompt_tokens"], len(want),
                         "%s: the chat template rendered another prompt than jinja2" % family)
        self.assertEqual(chat["usage"]["completion_tokens"], MAX_TOKENS)
        self.assertEqual(chat["choices"][0]["finish_reason"], "length")
        if call is not None:
            import jsonschema

            message = call["choices"][0]["message"]
            self.assertEqual(call["choices"][0]["finish_reason"], "tool_calls", message)
            self.assertEqual(len(message["tool_calls"]), 1, message)
            function = message["tool_calls"][0]["function"]
            self.assertEqual(function["name"], "get_weather")
            jsonschema.validate(json.loads(function["arguments"]),
                                WEATHER["function"]["parameters"])
            self.assertEqual(answer["choices"][0]["message"]["role"], "assistant")

    def test_mistral_small(self):
        self.check("mistral-small")

    def test_sentencepiece_llama(self):
        self.check("llama-spm")

    def test_qwen2(self):
        self.check("qwen2")

    def test_qwen3(self):
        self.check("qwen3")

    def test_phi3(self):
        self.check("phi3")

    def test_gemma3(self):
        self.check("gemma3")


if __name__ == "__main__":
    tpserve_cluster.run_tests()

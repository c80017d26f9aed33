"""families_chat: a SentencePiece (llama-spm) and a qwen2 model served end to end at tp 2.

tpserve-mkmodel marries each vocabulary of llama.cpp's suite (fetched by
scripts/fetch-llama-cpp-models.sh) with random weights of its family's shape: llama-spm's
32,000-token SentencePiece vocabulary on a Llama, qwen2's 151,643-token byte-level vocabulary on a
Qwen2 with q/k/v biases. Each is served at tp 2 with a real chat template of the family (Mistral-Nemo's
[INST] template for the SentencePiece model, Qwen2.5's for the Qwen2 one) through the OpenAI chat
API. The rendered prompt is checked against the independent references: jinja2 renders the
template, HF's `tokenizers` (with the tokenizer.json hf_tokenizer_families writes for the family)
tokenizes the text; tpserve's gRPC Tokenize of that text must give those ids, and the chat
completion must count exactly as many prompt tokens and generate its max_tokens.
"""

import json
import os
import subprocess
import sys
import unittest
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
                  "tokenizer": families.sentencepiece_tokenizer, "args": []},
    "qwen2": {"arch": "qwen2", "template": "Qwen-Qwen2.5-7B-Instruct.jinja",
              "tokenizer": lambda g: families.byte_level_tokenizer(g, "qwen2"), "args": []},
}


def render(template_path, gguf):
    """The prompt as Hugging Face renders it: jinja2 with HF's settings and special tokens."""
    import jinja2

    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                                     extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    environment.globals["raise_exception"] = raise_exception
    m = gguf.metadata
    tokens = m["tokenizer.ggml.tokens"]
    return environment.from_string(source).render(
        messages=MESSAGES, add_generation_prompt=True,
        bos_token=tokens[m["tokenizer.ggml.bos_token_id"]] if "tokenizer.ggml.bos_token_id" in m
        else "",
        eos_token=tokens[m["tokenizer.ggml.eos_token_id"]])


class FamiliesChat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-families-chat-")

    def check(self, family):
        import grpc
        from tokenizers import Tokenizer

        case = CASES[family]
        vocab_path = os.path.join(SUITE, "ggml-vocab-%s.gguf" % family)
        self.assertTrue(os.path.exists(vocab_path),
                        "%s is missing: run scripts/fetch-llama-cpp-models.sh" % vocab_path)
        gguf = Gguf(vocab_path)
        model = os.path.join(self.tmp.name, family + ".gguf")
        subprocess.run([os.path.join(self.args.bin_dir, "tpserve-mkmodel"), "--output", model,
                        "--vocab-from", vocab_path, "--arch", case["arch"], "--layers", "2",
                        "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--ffn", "256",
                        "--context", "1024", "--seed", "7"],
                       check=True, capture_output=True, timeout=120)
        template = os.path.join(SUITE, "templates", case["template"])
        text = render(template, gguf)
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
            body = json.dumps({"model": name, "messages": MESSAGES, "max_tokens": MAX_TOKENS,
                               "temperature": 0, "ignore_eos": True})
            request = urllib.request.Request(cluster.http_url + "/v1/chat/completions",
                                             body.encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                chat = json.load(response)
        print("%s: %d prompt tokens, answer %r" % (family, len(want),
                                                  chat["choices"][0]["message"]["content"]),
              flush=True)
        self.assertEqual(got, want, "%s: tpserve and HF tokenize the rendered prompt apart"
                         % family)
        self.assertEqual(chat["usage"]["prompt_tokens"], len(want),
                         "%s: the chat template rendered another prompt than jinja2" % family)
        self.assertEqual(chat["usage"]["completion_tokens"], MAX_TOKENS)
        self.assertEqual(chat["choices"][0]["finish_reason"], "length")

    def test_sentencepiece_llama(self):
        self.check("llama-spm")

    def test_qwen2(self):
        self.check("qwen2")


if __name__ == "__main__":
    tpserve_cluster.run_tests()

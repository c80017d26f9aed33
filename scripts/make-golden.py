#!/usr/bin/env python3
"""Writes the golden files that tests compare tpserve against, computed by llama.cpp.

  tokenizer: tests/golden/tokenizer_corpus.json (list of strings)
             -> tests/golden/tokenizer_ids.json ([{"text", "ids"}])
  tokenizer-families: its first 300 strings through each vocabulary of llama.cpp's tokenizer
             suite (scripts/fetch-llama-cpp-models.sh), special tokens not parsed, no BOS
             -> tests/golden/tokenizer_families_ids.json ({family: [ids per string]})
  logits:    tests/golden/logit_prompts.json (list of strings, special tokens allowed)
             -> tests/golden/logits_top20.json and logits_top20_q8act.json
                ([{"prompt", "ids", "top": [[[id, logit] x20] per position]}])
  architectures: a random-weight Q8_0 model of each architecture's shape (tpserve-mkmodel, its
             arguments and the file's sha256 recorded) through llama.cpp's own kernels, by
             scripts/llama_cpp_logits.cc built against the llama.cpp that
             bench/compare_llama_server.py builds for this CPU
             -> tests/golden/logits_architectures_llamacpp.json
                ({case: {"mkmodel": [args], "sha256", "prompts": [{"ids", "top"}]}})

Two logits references. llama.cpp multiplies Q4_1/Q8_0 weights with activations rounded to 8 bits
per 32-element block; that rounding changes logits by ~0.2 (as much as between two fp32
implementations that merely sum in another order and then round), so near-ties flip. The main
reference therefore runs llama.cpp on the same weights decoded to F32 by the `gguf` package (an
independent decoder) with an F32 KV cache: the model's exact function, computed by llama.cpp.
logits_top20_q8act.json keeps what llama.cpp computes on the quantized file itself.

A developer tool (pip install -r scripts/requirements-golden.txt for all but `architectures`);
tests only read its output.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

GGML_TYPE_F32 = 0

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
TOP_K = 20


def load(path):
    with open(os.path.join(GOLDEN, path), encoding="utf-8") as f:
        return json.load(f)


def save(path, value):
    with open(os.path.join(GOLDEN, path), "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


def tokenizer_golden(llm):
    corpus = load("tokenizer_corpus.json")
    out = []
    for text in corpus:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        out.append({"text": text, "ids": ids})
    save("tokenizer_ids.json", out)


FAMILIES = ("llama-spm", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "phi-3", "gpt-2")
FAMILY_STRINGS = 300


def tokenizer_families_golden(models_dir):
    from llama_cpp import Llama

    corpus = load("tokenizer_corpus.json")[:FAMILY_STRINGS]
    out = {}
    for family in FAMILIES:
        vocab = Llama(model_path=os.path.join(models_dir, f"ggml-vocab-{family}.gguf"),
                      vocab_only=True, verbose=False)
        out[family] = [vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)
                       for text in corpus]
        print(f"{family}: {len(corpus)} strings", file=sys.stderr)
    save("tokenizer_families_ids.json", out)


def write_f32_copy(src, dst):
    """Writes `src` with every tensor decoded to F32 and the metadata unchanged."""
    import gguf

    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, arch=reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        if name == "general.file_type":
            value = int(gguf.LlamaFileType.ALL_F32)
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, data.reshape(list(reversed(tensor.shape.tolist()))))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()


def logits_golden(llm, out_name):
    prompts = load("logit_prompts.json")
    out = []
    for i, prompt in enumerate(prompts):
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
        top = []
        for row in logits:
            order = np.argsort(-row, kind="stable")[:TOP_K]
            top.append([[int(t), round(float(row[t]), 5)] for t in order])
        out.append({"prompt": prompt, "ids": ids, "top": top})
        print(f"prompt {i + 1}/{len(prompts)}: {len(ids)} positions", file=sys.stderr)
    save(out_name, out)


# Each architecture's shape, small; Q8_0 so that both sides run their packed kernels. Prompts are
# random ids, as the byte-level vocabulary makes any id a token.
ARCHITECTURES = {
    "qwen2": ["--arch", "qwen2", "--heads", "4", "--kv-heads", "2", "--rope-theta", "1000000",
              "--tied-embeddings"],
    "qwen3": ["--arch", "qwen3", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
              "--rope-theta", "1000000", "--tied-embeddings"],
    "mistral_nemo": ["--arch", "llama", "--heads", "4", "--kv-heads", "1", "--head-dim", "64",
                     "--rope-theta", "1000000"],
    "phi3": ["--arch", "phi3", "--heads", "8", "--kv-heads", "4", "--sliding-window", "128"],
    # 7 layers: layer 6 global, the others local (a window of 128 that the prompts stay within).
    "gemma3": ["--arch", "gemma3", "--heads", "4", "--kv-heads", "1", "--head-dim", "64",
               "--rope-theta", "1000000", "--rope-scaling", "linear", "--rope-scaling-factor",
               "8", "--sliding-window", "128", "--tied-embeddings", "--layers", "7"],
}
ARCHITECTURE_SHAPE = ["--hidden", "256", "--ffn", "512", "--vocab", "512", "--context", "512",
                      "--seed", "11", "--dtype", "q8_0"]
ARCHITECTURE_PROMPTS = [(40, 1), (17, 2)]  # (length, seed)


def llama_cpp_logits_binary(workdir):
    """scripts/llama_cpp_logits.cc built against the native llama.cpp of the speed comparison."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import compare_llama_server

    compare_llama_server.llama_cpp_native("llama-server")  # builds the libraries once
    native = compare_llama_server.NATIVE
    lib = os.path.join(native, "build")
    binary = os.path.join(workdir, "llama_cpp_logits")
    subprocess.run(["c++", "-std=c++17", "-O2", "-fopenmp",
                    os.path.join(ROOT, "scripts", "llama_cpp_logits.cc"),
                    "-I", os.path.join(native, "src", "include"),
                    "-I", os.path.join(native, "src", "ggml", "include"),
                    os.path.join(lib, "src", "libllama.a"),
                    os.path.join(lib, "ggml", "src", "libggml.a"),
                    os.path.join(lib, "ggml", "src", "libggml-cpu.a"),
                    os.path.join(lib, "ggml", "src", "libggml-base.a"),
                    "-lpthread", "-ldl", "-o", binary], check=True)
    return binary


def architectures_golden(threads):
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        binary = llama_cpp_logits_binary(tmp)
        for name, arch_args in ARCHITECTURES.items():
            args = (arch_args + ARCHITECTURE_SHAPE
                    + ([] if "--layers" in arch_args else ["--layers", "2"]))
            path = os.path.join(tmp, name + ".gguf")
            subprocess.run([os.path.join(ROOT, "build", "bin", "tpserve-mkmodel"), "--output",
                            path] + args, check=True, capture_output=True)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            prompts = [[int(t) for t in np.random.default_rng(seed).integers(3, 512, length)]
                       for length, seed in ARCHITECTURE_PROMPTS]
            stdin = "".join(" ".join(map(str, ids)) + "\n" for ids in prompts)
            lines = subprocess.run([binary, path, str(TOP_K), str(threads)], input=stdin,
                                   check=True, capture_output=True, text=True).stdout.splitlines()
            out[name] = {"mkmodel": args, "sha256": digest,
                         "prompts": [{"ids": ids, "top": json.loads(line)}
                                     for ids, line in zip(prompts, lines)]}
            print(f"{name}: {len(prompts)} prompts", file=sys.stderr)
    save("logits_architectures_llamacpp.json", out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["tokenizer", "tokenizer-families", "logits", "all",
                                         "architectures"])
    parser.add_argument("--llama-cpp-models",
                        default=os.path.join(ROOT, "build-deps", "llama_cpp_python-0.3.36",
                                             "vendor", "llama.cpp", "models"))
    parser.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.what == "architectures":
        architectures_golden(args.threads)
        return

    def open_model(path, **kwargs):
        from llama_cpp import Llama

        return Llama(model_path=path, n_ctx=2048, n_batch=512, logits_all=True,
                     n_threads=args.threads, verbose=False, **kwargs)

    if args.what in ("tokenizer-families", "all"):
        tokenizer_families_golden(args.llama_cpp_models)
        if args.what == "tokenizer-families":
            return
    llm = open_model(args.model)
    if args.what in ("tokenizer", "all"):
        tokenizer_golden(llm)
    if args.what in ("logits", "all"):
        logits_golden(llm, "logits_top20_q8act.json")
        with tempfile.TemporaryDirectory() as tmp:
            f32 = os.path.join(tmp, "model-f32.gguf")
            write_f32_copy(args.model, f32)
            logits_golden(open_model(f32, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32),
                          "logits_top20.json")


if __name__ == "__main__":
    main()

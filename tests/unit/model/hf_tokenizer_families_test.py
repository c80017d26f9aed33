"""hf_tokenizer_families: tokenizer.json files, as Hugging Face writes them, give llama.cpp's ids.

llama.cpp's tokenizer suite (ggml-vocab-FAMILY.gguf with .inp texts and .out ids, the .out made by
each model's own Hugging Face tokenizer) is fetched by scripts/fetch-llama-cpp-models.sh. For each
family this test writes the tokenizer.json that family's models ship (the vocabulary and merges
from the GGUF file; the normalizer, pre-tokenizer and model options of the real files: Llama-3's
and Qwen2's regex Splits, GPT-2's ByteLevel, Llama-2's SentencePiece-style BPE with byte fallback
and merges ordered by piece score, as transformers' converter orders them), checks with HF's own
`tokenizers` that the file encodes the suite as the .out says, then encodes the suite with
hf_tokenizer_encode (tpserve's reading of tokenizer.json) and requires the same ids.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "integration"))
from gguf_reader import Gguf  # noqa: E402

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CONTROL, USER_DEFINED = 3, 4
ARGS = None


def split_then_byte_level(regex):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}


BYTE_LEVEL_FAMILIES = {
    "llama-bpe": (split_then_byte_level(LLAMA3_REGEX), True),
    "qwen2": (split_then_byte_level(QWEN2_REGEX), False),
    "qwen35": (split_then_byte_level(QWEN35_REGEX), False),
    "gpt-2": ({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": True}, False),
}


def added_tokens(tokens, types):
    return [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": kind == CONTROL}
            for i, (t, kind) in enumerate(zip(tokens, types)) if kind in (CONTROL, USER_DEFINED)]


def bpe_model(vocab, merges, **options):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False, "vocab": vocab, "merges": merges}
    model.update(options)
    return model


def byte_level_tokenizer(gguf, family):
    m = gguf.metadata
    tokens, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
    pre_tokenizer, ignore_merges = BYTE_LEVEL_FAMILIES[family]
    return {"version": "1.0", "added_tokens": added_tokens(tokens, types), "normalizer": None,
            "pre_tokenizer": pre_tokenizer, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": bpe_model({t: i for i, t in enumerate(tokens)},
                               [merge.split(" ", 1) for merge in m["tokenizer.ggml.merges"]],
                               ignore_merges=ignore_merges)}


def sentencepiece_merges(tokens, scores):
    """transformers' SentencePieceExtractor: every split of a piece into two pieces is a merge,
    merges ordered by the merged piece's score, best first (ties by the halves' ids)."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, score in zip(tokens, scores):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    merges.sort(key=lambda merge: merge[2], reverse=True)
    return [[left, right] for left, right, _ in merges]


def sentencepiece_tokenizer(gguf):
    m = gguf.metadata
    tokens, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
    unk = tokens[m.get("tokenizer.ggml.unknown_token_id", 0)]
    return {"version": "1.0",
            "added_tokens": added_tokens(tokens, types),
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None, "post_processor": None, "decoder": None,
            "model": bpe_model({t: i for i, t in enumerate(tokens)},
                               sentencepiece_merges(tokens, m["tokenizer.ggml.scores"]),
                               unk_token=unk, fuse_unk=True, byte_fallback=True)}


def read_suite(vocab_path):
    with open(vocab_path + ".inp", encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    with open(vocab_path + ".out", encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(lines) == len(texts), "%s: %d texts, %d id lines" % (vocab_path, len(texts),
                                                                    len(lines))
    return texts, [[int(i) for i in line.split()] for line in lines]


class HfTokenizerFamilies(unittest.TestCase):
    def check(self, family, make):
        from tokenizers import Tokenizer

        vocab_path = os.path.join(ARGS.llama_cpp_models, "ggml-vocab-%s.gguf" % family)
        self.assertTrue(os.path.exists(vocab_path),
                        "%s is missing: run scripts/fetch-llama-cpp-models.sh" % vocab_path)
        texts, want = read_suite(vocab_path)
        with tempfile.TemporaryDirectory(prefix="tpserve-hf-tok-") as folder:
            with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(make(Gguf(vocab_path)), f, ensure_ascii=False)
            hf = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
            for text, ids in zip(texts, want):
                self.assertEqual(hf.encode(text, add_special_tokens=False).ids, ids,
                                 "%s: the tokenizer.json written here is not the family's: %r"
                                 % (family, text))
            texts_path = os.path.join(folder, "texts.json")
            with open(texts_path, "w", encoding="utf-8") as f:
                json.dump(texts, f, ensure_ascii=False)
            result = subprocess.run([ARGS.encoder, folder, texts_path], capture_output=True,
                                    text=True, timeout=120)
            self.assertEqual(result.returncode, 0, result.stderr)
            got = json.loads(result.stdout)
        self.assertEqual(len(got), len(texts), family)
        for text, ids, mine in zip(texts, want, got):
            self.assertEqual(mine, ids, "%s: %r" % (family, text))
        print("%s: %d of %d cases" % (family, len(texts), len(texts)), flush=True)

    def test_llama_bpe(self):
        self.check("llama-bpe", lambda g: byte_level_tokenizer(g, "llama-bpe"))

    def test_qwen2(self):
        self.check("qwen2", lambda g: byte_level_tokenizer(g, "qwen2"))

    def test_qwen35(self):
        self.check("qwen35", lambda g: byte_level_tokenizer(g, "qwen35"))

    def test_gpt2(self):
        self.check("gpt-2", lambda g: byte_level_tokenizer(g, "gpt-2"))

    def test_llama_spm(self):
        self.check("llama-spm", sentencepiece_tokenizer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--encoder", required=True, help="the hf_tokenizer_encode binary")
    parser.add_argument("--llama-cpp-models", required=True,
                        help="vendor/llama.cpp/models of the llama-cpp-python sdist")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

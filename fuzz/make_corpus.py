#!/usr/bin/env python3
"""Writes the binary seed files beside the committed text seeds: scripts/fuzz.sh runs it into its
temporary copy of fuzz/corpus/ before each run, so only this generator is in the tree.

    fuzz/make_corpus.py BUILD_DIR CORPUS_DIR

gguf/: a GGUF image written here, independently of model/gguf_writer.cc, with a value of every
metadata type and a tensor of every supported ggml type; and two tiny models from the build's
tpserve-mkmodel (its writer, its vocabulary and config keys). step/: StepRequest streams in the
protobuf delimited format, encoded by protoc from the text protos below. hf_folder/: a safetensors
image (first byte 0) and tokenizer.json texts of each recognised form (first byte 1, then the
vocabulary's rows as a little-endian uint16), written here from the formats' documentation.
"""
import json
import os
import random
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "proto")


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


# (type id, struct format) of GGUF's scalar metadata types.
SCALARS = {"u8": (0, "B"), "i8": (1, "b"), "u16": (2, "H"), "i16": (3, "h"), "u32": (4, "I"),
           "i32": (5, "i"), "f32": (6, "f"), "bool": (7, "?"), "u64": (10, "Q"), "i64": (11, "q"),
           "f64": (12, "d")}


def gguf_value(kind, value):
    if kind == "str":
        return struct.pack("<I", 8) + gguf_string(value)
    if kind == "array":
        element_kind, values = value
        body = b"".join(gguf_value(element_kind, v)[4:] for v in values)
        element_type = {"str": 8, "array": 9}.get(element_kind) or SCALARS[element_kind][0]
        return struct.pack("<IIQ", 9, element_type, len(values)) + body
    type_id, fmt = SCALARS[kind]
    return struct.pack("<I" + fmt, type_id, value)


# ggml type id: (elements per block, bytes per block).
TENSOR_TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
                "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210),
                "BF16": (30, 1, 2)}


def all_types_gguf():
    rng = random.Random(14)
    metadata = [
        ("general.architecture", "str", "llama"),
        ("general.alignment", "u32", 32),
        ("t.u8", "u8", 200), ("t.i8", "i8", -5), ("t.u16", "u16", 60000), ("t.i16", "i16", -300),
        ("t.i32", "i32", -70000), ("t.f32", "f32", 0.5), ("t.bool", "bool", True),
        ("t.u64", "u64", 1 << 40), ("t.i64", "i64", -(1 << 40)), ("t.f64", "f64", 2.25),
        ("t.strings", "array", ("str", ["a", "bc", ""])),
        ("t.ints", "array", ("i32", [1, -2, 3])),
        ("t.floats", "array", ("f32", [1.5, -2.5])),
        ("t.nested", "array", ("array", [("u8", [1, 2]), ("u8", [])])),
    ]
    tensors = []
    for name, (type_id, block_elements, block_bytes) in TENSOR_TYPES.items():
        elements = max(block_elements, 8)
        data = bytes(rng.randrange(256) for _ in range(elements // block_elements * block_bytes))
        tensors.append((name.lower() + ".weight", type_id, [elements], data))
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        out += gguf_string(key) + gguf_value(kind, value)
    offset = 0
    for name, type_id, dims, data in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", type_id, offset)
        offset += (len(data) + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % 32)
    return out


def varint(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def encode_step(text):
    return subprocess.run(
        ["protoc", "-I", PROTO_DIR, "--encode=tpserve.v1.StepRequest", "tpserve/v1/worker.proto"],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


ALLOW_ALL = " ".join(["token_bitmask: 4294967295"] * 10)  # one row of the fuzz target's 300 tokens

# Each seed: the text protos of consecutive steps. Sampling parameters are always complete, as
# the coordinator sends them: proto3's zero top_p and repetition_penalty are refused.
GREEDY = "sampling { temperature: 0 top_p: 1 repetition_penalty: 1 }"

STEP_SEEDS = {
    "prefill_decode_finish": [
        f"step_id: 1 new_sequences {{ seq_id: 1 {GREEDY} prompt_token_ids: [1, 2, 3] }}"
        " sequences { seq_id: 1 token_ids: [1, 2, 3] start_position: 0 new_block_ids: [0]"
        " sample: true }",
        "step_id: 2 sequences { seq_id: 1 token_ids: [7] start_position: 3 sample: true }",
        "step_id: 3 finished_seq_ids: [1]",
    ],
    "chunked_prefill_two_sequences": [
        "step_id: 1 new_sequences { seq_id: 5 sampling { temperature: 0.8 top_k: 40 top_p: 0.9"
        " min_p: 0.05 repetition_penalty: 1 seed: 7 } prompt_token_ids: [10, 11, 12, 13, 14, 15,"
        " 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27] }"
        " new_sequences { seq_id: 6 sampling { temperature: 1 top_p: 1 repetition_penalty: 1 }"
        " prompt_token_ids: [4] }"
        " sequences { seq_id: 5 token_ids: [10, 11, 12, 13, 14, 15, 16, 17] start_position: 0"
        " new_block_ids: [3] }"
        " sequences { seq_id: 6 token_ids: [4] new_block_ids: [4] sample: true }",
        "step_id: 2 sequences { seq_id: 5 token_ids: [18, 19, 20, 21, 22, 23, 24, 25, 26, 27]"
        " start_position: 8 new_block_ids: [5] sample: true }"
        " sequences { seq_id: 6 token_ids: [9] start_position: 1 sample: true }",
    ],
    "drafts_verified": [
        f"step_id: 1 new_sequences {{ seq_id: 2 {GREEDY} prompt_token_ids: [1, 2] }}"
        " sequences { seq_id: 2 token_ids: [1, 2] new_block_ids: [1] sample: true }",
        "step_id: 2 sequences { seq_id: 2 token_ids: [3] start_position: 2 draft_token_ids: [4, 5]"
        " sample: true }",
        "step_id: 3 sequences { seq_id: 2 token_ids: [6] start_position: 4 sample: true"
        " draft_token_ids: [7] draft_probs: [" + ", ".join(["0.0033333"] * 300) + "] }",
    ],
    "penalties_logprobs_bitmask": [
        "step_id: 1 new_sequences { seq_id: 9 sampling { temperature: 0.7 top_p: 1"
        " repetition_penalty: 1.2 presence_penalty: 0.5 frequency_penalty: 0.3 seed: 3 }"
        " prompt_token_ids: [5, 5, 6] output_token_ids: [7] return_logprobs: true"
        " top_logprobs: 3 }"
        " sequences { seq_id: 9 token_ids: [5, 5, 6, 7] new_block_ids: [2] sample: true "
        + ALLOW_ALL + " }",
    ],
    "score_all_logits": [
        f"step_id: 1 new_sequences {{ seq_id: 4 {GREEDY} prompt_token_ids: [8, 9, 10] }}"
        " sequences { seq_id: 4 token_ids: [8, 9, 10] new_block_ids: [6] all_logits: true }",
    ],
    "cached_prefix_start": [
        f"step_id: 1 new_sequences {{ seq_id: 3 {GREEDY} prompt_token_ids: [1, 2, 3, 4, 5, 6,"
        " 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17] }"
        " sequences { seq_id: 3 token_ids: [17] start_position: 16 new_block_ids: [0, 1]"
        " sample: true }",
    ],
}


def gpt2_byte_symbols():
    """GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the others
    take the code points from 256 up, in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def byte_level_tokenizer(pre_tokenizer, ignore_merges=False):
    vocab = {s: i for i, s in enumerate(gpt2_byte_symbols())}
    for merged in ("He", "ll", "llo", "\u0120w"):
        vocab[merged] = len(vocab)
    merges = [["H", "e"], ["l", "l"], ["ll", "o"], ["\u0120", "w"]]
    added = [{"id": len(vocab), "content": "<|endoftext|>", "special": True},
             {"id": len(vocab) + 1, "content": "<tool>", "special": False}]
    return {"added_tokens": added, "normalizer": None, "pre_tokenizer": pre_tokenizer,
            "model": {"type": "BPE", "vocab": vocab, "merges": merges,
                      "ignore_merges": ignore_merges}}


def sentencepiece_tokenizer():
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + [
        "\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"]
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = [["\u2581", "a"], ["a", "b"], ["\u2581a", "b"]]
    return {"added_tokens": [{"id": 1, "content": "<s>", "special": True}],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "},
                 "content": "\u2581"}]},
            "pre_tokenizer": None,
            "model": {"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": True,
                      "unk_token": "<unk>"}}


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def safetensors_image():
    header = {"__metadata__": {"format": "pt"},
              "a.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
              "b.bias": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]}}
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(range(24))


def hf_folder_seeds():
    """(name, bytes) of the hf_folder target's seeds."""
    digits_byte_level = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}
    llama3 = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated"},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
    texts = {
        "smollm": byte_level_tokenizer(digits_byte_level),
        "gpt2": byte_level_tokenizer({"type": "ByteLevel", "use_regex": True}),
        "llama3": byte_level_tokenizer(llama3, ignore_merges=True),
        "sentencepiece": sentencepiece_tokenizer(),
    }
    seeds = [("model.safetensors", b"\x00" + safetensors_image())]
    for name, tokenizer in texts.items():
        rows = max(t["id"] for t in tokenizer["added_tokens"]) + 1
        rows = max(rows, len(tokenizer["model"]["vocab"]))
        seeds.append((name + ".json", b"\x01" + struct.pack("<H", rows - 1) +
                      json.dumps(tokenizer, ensure_ascii=False).encode()))
    return seeds


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: fuzz/make_corpus.py BUILD_DIR (with bin/tpserve-mkmodel built) CORPUS_DIR")
    mkmodel = os.path.join(sys.argv[1], "bin", "tpserve-mkmodel")
    corpus = sys.argv[2]
    write(os.path.join(corpus, "gguf", "all_types.gguf"), all_types_gguf())
    for dtype, hidden in (("f32", 8), ("q8_0", 32)):
        subprocess.run([mkmodel, "--output", os.path.join(corpus, "gguf", f"tiny_{dtype}.gguf"),
                        "--layers", "1", "--hidden", str(hidden), "--heads", "2", "--kv-heads",
                        "1", "--ffn", str(hidden), "--vocab", "259", "--context", "64",
                        "--dtype", dtype], check=True)
    for name, data in hf_folder_seeds():
        write(os.path.join(corpus, "hf_folder", name), data)
    for name, steps in STEP_SEEDS.items():
        stream = b""
        for text in steps:
            message = encode_step(text)
            stream += varint(len(message)) + message
        write(os.path.join(corpus, "step", name + ".bin"), stream)


if __name__ == "__main__":
    main()

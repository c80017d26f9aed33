"""A Hugging Face model folder written from a GGUF file (read by gguf_reader) with the real
`safetensors` package: HF tensor names and layout, config.json, tokenizer.json,
tokenizer_config.json, generation_config.json. Independent of tpserve's folder reader, which the
tests compare against it."""

import json
import os

import numpy as np

from gguf_reader import unpermute_llama_qk

_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
                "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
                "attn_qkv": "self_attn.qkv_proj"}
# Phi-3's ffn_up is its fused [gate | up] projection.
_PHI3_NAMES = dict(_LAYER_NAMES, ffn_up="mlp.gate_up_proj")
# Gemma 3's norms around each block.
_GEMMA3_NAMES = dict(_LAYER_NAMES, ffn_norm="pre_feedforward_layernorm",
                     post_attention_norm="post_attention_layernorm",
                     post_ffw_norm="post_feedforward_layernorm")
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
              "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}


def hf_name(gguf_name, arch="llama"):
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    _, layer, part, suffix = gguf_name.split(".")
    names = {"phi3": _PHI3_NAMES, "gemma3": _GEMMA3_NAMES}.get(arch, _LAYER_NAMES)
    return "model.layers.%s.%s.%s" % (layer, names[part], suffix)


def hf_tensors(gguf):
    """The model's tensors under HF names, in HF layout, float32: llama.cpp's converter permutes the
    Q/K rows of "llama" files (not "qwen2" ones), which are put back; rope_freqs.weight is no HF
    tensor (config.json's rope_scaling says it)."""
    m = gguf.metadata
    arch = m["general.architecture"]
    heads = m[arch + ".attention.head_count"]
    kv_heads = m[arch + ".attention.head_count_kv"]
    tensors = {}
    for name, values in gguf.tensors.items():
        if name == "rope_freqs.weight":
            continue
        if arch == "llama" and ".attn_q.weight" in name:
            values = unpermute_llama_qk(values, heads)
        elif arch == "llama" and ".attn_k.weight" in name:
            values = unpermute_llama_qk(values, kv_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            values = values - 1.0  # Gemma3RMSNorm stores w of 1 + w; llama.cpp stores 1 + w
        tensors[hf_name(name, arch)] = np.ascontiguousarray(values, dtype=np.float32)
    return tensors


def config_json(gguf, rope_scaling=None):
    """config.json as transformers writes it for the GGUF file's model; `rope_scaling` is HF's
    dict (the GGUF file holds llama3's only as the tensor it computes)."""
    m = gguf.metadata
    arch = m["general.architecture"]
    p = arch + "."
    window = m.get(p + "attention.sliding_window")
    config = {
        "hidden_size": m[p + "embedding_length"],
        "intermediate_size": m[p + "feed_forward_length"],
        "num_hidden_layers": m[p + "block_count"],
        "num_attention_heads": m[p + "attention.head_count"],
        "num_key_value_heads": m[p + "attention.head_count_kv"],
        "max_position_embeddings": m[p + "context_length"],
        "rms_norm_eps": m[p + "attention.layer_norm_rms_epsilon"],
        "rope_theta": m[p + "rope.freq_base"], "rope_scaling": rope_scaling,
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        "vocab_size": len(m["tokenizer.ggml.tokens"]), "torch_dtype": "float32",
        "bos_token_id": m["tokenizer.ggml.bos_token_id"],
        "eos_token_id": m["tokenizer.ggml.eos_token_id"],
    }
    if p + "attention.key_length" in m:
        config["head_dim"] = m[p + "attention.key_length"]
    if arch == "gemma3":
        config.update(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
                      sliding_window=window, sliding_window_pattern=6,
                      rope_local_base_freq=10000.0, query_pre_attn_scalar=config["head_dim"],
                      hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                      attn_logit_softcapping=None)
    elif arch == "phi3":
        config.update(architectures=["Phi3ForCausalLM"], model_type="phi3",
                      sliding_window=window)
    elif arch in ("qwen2", "qwen3"):
        name = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]
        config.update(architectures=[name], model_type=arch, use_sliding_window=False,
                      sliding_window=4096)
    elif window:
        config.update(architectures=["MistralForCausalLM"], model_type="mistral",
                      sliding_window=window)
    else:
        config.update(architectures=["LlamaForCausalLM"], model_type="llama")
    return config


def tokenizer_files(gguf):
    """tokenizer.json and tokenizer_config.json as HF writes them for SmolLM2 (and tpserve-mkmodel's
    byte-level vocabulary, whose pre-tokenizer is the same): byte-level BPE, digits split one by
    one before ByteLevel's GPT-2 regex, control tokens as added tokens."""
    m = gguf.metadata
    tokens, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (t, kind) in enumerate(zip(tokens, types)) if kind == 3]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [merge.split(" ", 1) for merge in m["tokenizer.ggml.merges"]]},
    }
    config = {
        "add_bos_token": m["tokenizer.ggml.add_bos_token"],
        "bos_token": tokens[m["tokenizer.ggml.bos_token_id"]],
        "eos_token": tokens[m["tokenizer.ggml.eos_token_id"]],
        "chat_template": m["tokenizer.chat_template"],
        "model_max_length": m[m["general.architecture"] + ".context_length"],
        "tokenizer_class": "GPT2Tokenizer",
    }
    return tokenizer, config


_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def fp8_tensors(tensors, per_channel):
    """An FP8 checkpoint of `tensors` as llm-compressor (per channel: compressed-tensors) or
    ModelOpt (per tensor) writes one: each projection's weight as F8_E4M3 codes of weight / scale
    (ml_dtypes' rounding), scale = max |weight| / 448 over the row or the tensor, in
    `<name>_scale` (shape [rows, 1] or []), and a static `input_scale` beside it; the rest as they
    are. Also the same model's weights dequantized in float32 (code * scale): what a server of the
    checkpoint must compute with. Returns (checkpoint tensors, dequantized tensors)."""
    import ml_dtypes

    checkpoint, dequantized = {}, {}
    for name, values in tensors.items():
        if not any(name.endswith(p + ".weight") for p in _PROJECTIONS):
            checkpoint[name] = dequantized[name] = values
            continue
        w = values.astype(np.float32)
        amax = np.abs(w).max(axis=1, keepdims=True) if per_channel else np.abs(w).max()
        scale = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
        codes = (w / scale).astype(ml_dtypes.float8_e4m3fn)
        checkpoint[name] = codes
        checkpoint[name + "_scale"] = scale.reshape(-1, 1) if per_channel else scale.reshape(())
        checkpoint[name[:-len("weight")] + "input_scale"] = np.array([0.02], dtype=np.float32)
        dequantized[name] = codes.astype(np.float32) * scale
    return checkpoint, dequantized


def write_folder(gguf, tensors, folder, shards=1, rope_scaling=None, quantization=None):
    """The Hugging Face folder of `gguf`'s model with `tensors` (hf_tensors), over `shards`
    safetensors files (an index when more than one); `quantization` is config.json's
    quantization_config."""
    from safetensors.numpy import save_file

    os.makedirs(folder)
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for shard in range(shards):
            file = "model-%05d-of-%05d.safetensors" % (shard + 1, shards)
            part = {n: tensors[n] for n in names[shard::shards]}
            save_file(part, os.path.join(folder, file), metadata={"format": "pt"})
            weight_map.update({n: file for n in part})
        total = sum(t.nbytes for t in tensors.values())
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    tokenizer, tokenizer_config = tokenizer_files(gguf)
    config = config_json(gguf, rope_scaling)
    if quantization is not None:
        config["quantization_config"] = quantization
    for name, content in [("config.json", config),
                          ("tokenizer.json", tokenizer),
                          ("tokenizer_config.json", tokenizer_config),
                          ("generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})]:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False)

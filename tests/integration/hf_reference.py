"""Llama, Qwen2 and Qwen3 logits in float64 NumPy, written from the Hugging Face modelling formulas
(LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM), not from tpserve's
code: RMSNorm, rotate-half RoPE with the scaling rules of HF's rope_init functions, GQA causal
attention (with Mistral's sliding window), SwiGLU, q/k/v biases, Qwen3's per-head q/k RMSNorm
(Qwen3Attention: q_norm and k_norm over head_dim, before RoPE) and explicit head_dim, and
Phi3ForCausalLM's fused qkv_proj ([q | k | v] rows) and gate_up_proj (gate, up = chunk(2)), and
Gemma3ForCausalLM: Gemma3RMSNorm (x * rsqrt(mean x^2 + eps) * (1 + w), where llama.cpp's converter
stores 1 + w), the embedding times sqrt(hidden_size), q/k norms, every 6th layer global and the
others local (rope_local_base_freq 10000, unscaled, a sliding window), scores scaled by
query_pre_attn_scalar^-0.5, the attention and MLP outputs normed (post_attention_layernorm,
post_feedforward_layernorm) before the residual, gelu_pytorch_tanh gating. Weights come from a gguf_reader.Gguf; llama.cpp's
converter permutes the Q/K rows of "llama" files, which are put back into HF's order first."""

import math

import numpy as np

from gguf_reader import unpermute_llama_qk

class HfConfig:
    def __init__(self, gguf):
        m = gguf.metadata
        self.arch = m["general.architecture"]
        p = self.arch + "."
        self.layers = m[p + "block_count"]
        self.hidden = m[p + "embedding_length"]
        self.heads = m[p + "attention.head_count"]
        self.kv_heads = m[p + "attention.head_count_kv"]
        self.head_dim = m.get(p + "attention.key_length", self.hidden // self.heads)
        self.theta = m[p + "rope.freq_base"]
        self.eps = m[p + "attention.layer_norm_rms_epsilon"]
        self.sliding_window = m.get(p + "attention.sliding_window")
        self.gemma = self.arch == "gemma3"


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def default_inv_freq(theta, dim):
    # HF _compute_default_rope_parameters: 1 / base^(arange(0, dim, 2) / dim)
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def llama3_inv_freq(theta, dim, factor, low_freq_factor, high_freq_factor, original_context):
    # HF _compute_llama3_parameters
    inv_freq = default_inv_freq(theta, dim)
    low_freq_wavelen = original_context / low_freq_factor
    high_freq_wavelen = original_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama)


def linear_inv_freq(theta, dim, factor):
    # HF _compute_linear_scaling_rope_parameters: positions / factor, i.e. inv_freq / factor
    return default_inv_freq(theta, dim) / factor


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, positions, inv_freq):
    # x: [heads, tokens, head_dim]; emb = cat(freqs, freqs), x * cos + rotate_half(x) * sin
    freqs = np.outer(positions, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def silu(x):
    return x / (1 + np.exp(-x))


def reference_logits(gguf, tokens, inv_freq, permuted_qk=None, biases=True, kv_cache=None,
                     deltas=None, qk_norm=True, windows=True):
    """[tokens, vocab] logits of the HF model the GGUF file holds. `permuted_qk`: whether the
    file's Q/K rows are the converter's permutation of HF's (by default: for llama files only);
    `biases`: add the q/k/v biases the file has; `kv_cache(layer, k, v)`, when given, returns the
    K and V ([kv_heads, tokens, head_dim], K rotated) that attention reads, as a KV cache stores
    them; `deltas[(layer, "q_proj")]` (HF module names, HF row order), when given, is added to that
    weight: a LoRA adapter merged into the model; `qk_norm`: apply the q/k norms the file has;
    `windows`: attend within the sliding window the file declares."""
    deltas = deltas or {}

    def weight(layer, module, w):
        return w + deltas[(layer, module)] if (layer, module) in deltas else w

    c = HfConfig(gguf)
    if permuted_qk is None:
        permuted_qk = c.arch == "llama"
    t = gguf.tensors
    n = len(tokens)
    positions = np.arange(n, dtype=np.float64)
    group = c.heads // c.kv_heads
    def norm(x, name):
        if c.gemma:  # Gemma3RMSNorm's (1 + w), with w as HF stores it
            return rms_norm(x, 1.0 + (t[name] - 1.0), c.eps)
        return rms_norm(x, t[name], c.eps)

    x = t["token_embd.weight"][tokens]
    if c.gemma:
        x = x * math.sqrt(c.hidden)
    full = np.tril(np.ones((n, n), dtype=bool))
    windowed = full.copy()
    if c.sliding_window and windows:
        # Mistral, Gemma 3's local layers: query i sees keys j with i - j < sliding_window.
        distance = positions[:, None] - positions[None, :]
        windowed &= distance < c.sliding_window
    for layer in range(c.layers):
        b = "blk.%d." % layer
        local = c.gemma and (layer + 1) % 6 != 0
        causal = windowed if (local or not c.gemma) else full
        layer_freq = default_inv_freq(10000.0, c.head_dim) if local else inv_freq
        h = norm(x, b + "attn_norm.weight")
        if b + "attn_qkv.weight" in t:  # Phi-3
            q_rows, kv_rows = c.heads * c.head_dim, c.kv_heads * c.head_dim
            wq, wk, wv = np.split(t[b + "attn_qkv.weight"], [q_rows, q_rows + kv_rows])
        else:
            wq, wk, wv = t[b + "attn_q.weight"], t[b + "attn_k.weight"], t[b + "attn_v.weight"]
        bq = t.get(b + "attn_q.bias") if biases else None
        bk = t.get(b + "attn_k.bias") if biases else None
        bv = t.get(b + "attn_v.bias") if biases else None
        if permuted_qk:
            wq = unpermute_llama_qk(wq, c.heads)
            wk = unpermute_llama_qk(wk, c.kv_heads)
        wq, wk, wv = (weight(layer, "q_proj", wq), weight(layer, "k_proj", wk),
                      weight(layer, "v_proj", wv))
        q = h @ wq.T + (bq if bq is not None else 0)
        k = h @ wk.T + (bk if bk is not None else 0)
        v = h @ wv.T + (bv if bv is not None else 0)
        q = q.reshape(n, c.heads, c.head_dim).transpose(1, 0, 2)
        k = k.reshape(n, c.kv_heads, c.head_dim).transpose(1, 0, 2)
        v = v.reshape(n, c.kv_heads, c.head_dim).transpose(1, 0, 2)
        if qk_norm and b + "attn_q_norm.weight" in t:
            q = norm(q, b + "attn_q_norm.weight")
            k = norm(k, b + "attn_k_norm.weight")
        q = apply_rope(q, positions, layer_freq)
        k = apply_rope(k, positions, layer_freq)
        if kv_cache is not None:
            k, v = kv_cache(layer, k, v)
        k = np.repeat(k, group, axis=0)  # repeat_kv
        v = np.repeat(v, group, axis=0)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(c.head_dim)  # query_pre_attn_scalar
        scores = np.where(causal, scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        attn = (weights @ v).transpose(1, 0, 2).reshape(n, c.heads * c.head_dim)
        out = attn @ weight(layer, "o_proj", t[b + "attn_output.weight"]).T
        if c.gemma:
            out = norm(out, b + "post_attention_norm.weight")
        x = x + out
        h = norm(x, b + "ffn_norm.weight")
        if b + "ffn_gate.weight" in t:
            w_gate, w_up = t[b + "ffn_gate.weight"], t[b + "ffn_up.weight"]
        else:  # Phi-3's gate_up_proj
            w_gate, w_up = np.split(t[b + "ffn_up.weight"], 2)
        gate = h @ weight(layer, "gate_proj", w_gate).T
        up = h @ weight(layer, "up_proj", w_up).T
        out = ((gelu_tanh(gate) if c.gemma else silu(gate)) * up) @ weight(
            layer, "down_proj", t[b + "ffn_down.weight"]).T
        if c.gemma:
            out = norm(out, b + "post_ffw_norm.weight")
        x = x + out
    x = norm(x, "output_norm.weight")
    head = t.get("output.weight", t["token_embd.weight"])  # tied when output.weight is absent
    return x @ head.T


def fp8_kv_cache(k_scale, v_scale):
    """A `kv_cache` for reference_logits: K and V as an FP8 E4M3 cache holds them, rounded by
    ml_dtypes at layer l's scales k_scale(l) and v_scale(l) (one value, or one per KV head),
    saturating at 448."""
    import ml_dtypes

    def fp8(x, scale):
        scale = np.reshape(scale, (-1, 1, 1))
        codes = np.clip(x / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn)
        return codes.astype(np.float64) * scale

    return lambda layer, k, v: (fp8(k, k_scale(layer)), fp8(v, v_scale(layer)))

"""logits_families: tpserve's logits for each supported model family against NumPy.

Random-weight models written by tpserve-mkmodel (fp32): a Llama with Llama-3.1's llama3 RoPE
scaling, a Qwen2 with q/k/v biases and tied embeddings, a Qwen2 with untied embeddings and linear
RoPE scaling, a Mistral-7B-like shape (8 heads over 2 KV heads, theta 1e6, a sliding window), a
Qwen3 (per-head q/k RMSNorm, heads * head_dim above the hidden size) and Mistral Nemo's shape
(a Llama file whose head_dim is not hidden / heads).
Each is served at tp 1 and at a tp > 1 that splits its heads, and as a Hugging Face folder written
from it by hf_writer.py (HF tensor names and Q/K order, config.json with HF's rope_scaling, which
tpserve turns into llama3's factors itself) at the tp > 1, scored over gRPC (Score: one logits
row per prompt token), and compared with hf_reference.py, a NumPy model written from the Hugging
Face modelling formulas (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM): RMSNorm,
rotate-half RoPE with the scaling rules of HF's rope_init functions, GQA causal attention, SwiGLU,
biases. The tensors are read from the GGUF file by gguf_reader.py and put back into HF's layout
first: llama.cpp's converter permutes the Q/K rows of "llama" files (so that RoPE pairs are
adjacent) and keeps "qwen2" rows as they are. Each case also checks that the reference tells the feature apart (the
scaling, the biases, the permutation change the logits by far more than the tolerance), so a
reference that ignored one could not pass by accident.
"""

import os
import subprocess
import sys
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpserve_cluster  # noqa: E402
from gguf_reader import Gguf  # noqa: E402
from hf_writer import hf_tensors, write_folder  # noqa: E402
from hf_reference import (HfConfig, default_inv_freq, linear_inv_freq,  # noqa: E402
                          llama3_inv_freq, reference_logits)

TOLERANCE = 1e-4  # max |logit difference| in fp32 (each case is within 5e-6)
PROMPT_LENGTH = 40
EPS = 1e-5  # what tpserve-mkmodel writes as layer_norm_rms_epsilon

# ---------------------------------------------------------------------------------------------
# The cases

_COMMON = ["--hidden", "128", "--ffn", "192", "--vocab", "320", "--context",
           "256"]

CASES = {
    # Llama-3.1: rope_freqs.weight from the llama3 rule. An original context of 64 (8192 in the
    # real model) puts the smoothed band and the slowed frequencies among the 16 pairs that
    # 40 positions can tell apart.
    "llama3_rope": dict(
        args=["--arch", "llama", "--heads", "4", "--kv-heads", "2", "--rope-theta", "500000",
              "--rope-scaling", "llama3", "--rope-scaling-factor", "8",
              "--rope-low-freq-factor", "1", "--rope-high-freq-factor", "4",
              "--rope-original-context", "64"],
        tp=(1, 2),
        inv_freq=lambda c: llama3_inv_freq(c.theta, c.head_dim, 8.0, 1.0, 4.0, 64),
        hf_rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        controls=("unscaled_rope", "other_qk_layout")),
    # Qwen2-0.5B/1.5B: biases, tied embeddings.
    "qwen2_tied": dict(
        args=["--arch", "qwen2", "--heads", "4", "--kv-heads", "2", "--rope-theta", "1000000",
              "--tied-embeddings"],
        tp=(1, 4),
        inv_freq=lambda c: default_inv_freq(c.theta, c.head_dim),
        hf_rope_scaling=None,
        controls=("no_bias", "other_qk_layout")),
    # Qwen2-7B: biases, untied embeddings; with linear RoPE scaling by 4.
    "qwen2_untied_linear_rope": dict(
        args=["--arch", "qwen2", "--heads", "4", "--kv-heads", "4", "--rope-scaling", "linear",
              "--rope-scaling-factor", "4"],
        tp=(1, 2),
        inv_freq=lambda c: linear_inv_freq(c.theta, c.head_dim, 4.0),
        hf_rope_scaling={"rope_type": "linear", "factor": 4.0},
        controls=("no_bias", "unscaled_rope")),
    # Mistral-7B-v0.1's proportions: 8 heads over 2 KV heads, theta 1e6, a sliding window (16 of
    # a 256 context here, 4096 of 32768 there), which the 40-token prompt outgrows: the CPU's
    # attention applies it and serves the whole context.
    "mistral": dict(
        args=["--arch", "llama", "--heads", "8", "--kv-heads", "2", "--rope-theta", "1000000",
              "--sliding-window", "16"],
        tp=(1, 4),
        inv_freq=lambda c: default_inv_freq(c.theta, c.head_dim),
        served_context=256,
        hf_rope_scaling=None,
        controls=("other_qk_layout", "no_window")),
    # Qwen3-0.6B's proportions: each head's q and k RMS-normalized before RoPE, no biases, heads
    # of 48 whose 4 q heads (192) outnumber the hidden size (128), as 16 x 128 do 1024 there.
    "qwen3": dict(
        args=["--arch", "qwen3", "--heads", "4", "--kv-heads", "2", "--head-dim", "48",
              "--rope-theta", "1000000", "--tied-embeddings"],
        tp=(1, 2, 4),
        inv_freq=lambda c: default_inv_freq(c.theta, c.head_dim),
        hf_rope_scaling=None,
        controls=("no_qk_norm", "other_qk_layout")),
    # Phi-3-mini's layout: fused [q | k | v] and [gate | up] matrices, rotate-half RoPE, a window
    # (2047 of 4096 there, 16 of 256 here), 8 heads over 4 KV heads (Phi-3 has no GQA; Phi-4-mini
    # does).
    "phi3": dict(
        args=["--arch", "phi3", "--heads", "8", "--kv-heads", "4", "--sliding-window", "16"],
        tp=(1, 2, 4, 8),
        inv_freq=lambda c: default_inv_freq(c.theta, c.head_dim),
        served_context=256,
        hf_rope_scaling=None,
        controls=("other_qk_layout", "no_window")),
    # Gemma 3 (1B's proportions): heads of 64 wider than hidden / heads, 1 KV head, q/k and
    # block-output norms, GELU, sqrt(hidden) embedding scale; 7 layers, so that layer 6 is global
    # (theta 1e6, linear scaling by 8 as 4B+ have it, the whole context) and the others local
    # (theta 1e4, no scaling, a window of 16 here, 512 there, which the prompt outgrows).
    "gemma3": dict(
        args=["--arch", "gemma3", "--heads", "4", "--kv-heads", "1", "--head-dim", "64",
              "--rope-theta", "1000000", "--rope-scaling", "linear", "--rope-scaling-factor", "8",
              "--sliding-window", "16", "--tied-embeddings", "--layers", "7"],
        tp=(1, 2, 4),
        inv_freq=lambda c: linear_inv_freq(c.theta, c.head_dim, 8.0),
        served_context=256,
        hf_rope_scaling={"rope_type": "linear", "factor": 8.0},
        controls=("unscaled_rope", "no_window")),
    # Mistral Nemo's shape on a Llama file: head_dim (here 64) other than hidden / heads (32).
    "mistral_nemo": dict(
        args=["--arch", "llama", "--heads", "4", "--kv-heads", "1", "--head-dim", "64",
              "--rope-theta", "1000000"],
        tp=(1, 2, 4),
        inv_freq=lambda c: default_inv_freq(c.theta, c.head_dim),
        hf_rope_scaling=None,
        controls=("other_qk_layout",)),
}


def control_logits(name, gguf, tokens, inv_freq):
    c = HfConfig(gguf)
    if name == "unscaled_rope":
        return reference_logits(gguf, tokens, default_inv_freq(c.theta, c.head_dim))
    if name == "other_qk_layout":  # llama rows read as HF's, qwen2 rows as permuted
        return reference_logits(gguf, tokens, inv_freq, permuted_qk=c.arch != "llama")
    if name == "no_bias":
        return reference_logits(gguf, tokens, inv_freq, biases=False)
    if name == "no_qk_norm":
        return reference_logits(gguf, tokens, inv_freq, qk_norm=False)
    if name == "no_window":
        return reference_logits(gguf, tokens, inv_freq, windows=False)
    raise ValueError(name)


class LogitsFamilies(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-families-")

    def make_model(self, name, args):
        path = os.path.join(self.tmp.name, name + ".gguf")
        subprocess.run([os.path.join(self.args.bin_dir, "tpserve-mkmodel"), "--output", path,
                        "--seed", "11"] + _COMMON + args
                       + ([] if "--layers" in args else ["--layers", "2"]),
                       check=True, capture_output=True, timeout=60)
        return path

    def score(self, cluster, tokens, over_length=None):
        """The logits of `tokens`, the served context length, and the error that scoring
        `over_length` tokens gave (None when it did not fail, or was not asked)."""
        import grpc

        pb = self.protos.inference_pb2
        logits = tpserve_cluster.score_logits(self.protos, cluster, tokens)
        with grpc.insecure_channel(cluster.grpc_address) as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            stub = self.protos.inference_pb2_grpc.InferenceServiceStub(channel)
            context = stub.ListModels(pb.ListModelsRequest(), timeout=30).models[0].context_length
            refused = None
            if over_length is not None:
                try:
                    stub.Score(pb.ScoreRequest(prompt=pb.TokenIds(ids=[7] * over_length)),
                               timeout=60)
                except grpc.RpcError as error:
                    refused = error
        return logits, context, refused

    def check_family(self, name):
        case = CASES[name]
        path = self.make_model(name, case["args"])
        gguf = Gguf(path)
        config = HfConfig(gguf)
        vocab = gguf.tensors["token_embd.weight"].shape[0]
        tokens = [int(t) for t in np.random.default_rng(5).integers(0, vocab, PROMPT_LENGTH)]
        inv_freq = case["inv_freq"](config)
        want = reference_logits(gguf, tokens, inv_freq)
        for control in case["controls"]:
            # The reference without the feature must be far from the reference with it.
            gap = np.abs(control_logits(control, gguf, tokens, inv_freq) - want).max()
            self.assertGreater(gap, 50 * TOLERANCE, "%s: %s changes nothing" % (name, control))
        # The GGUF file at every tp, then the same model as a Hugging Face folder (config.json
        # with HF's rope_scaling, HF tensor names and Q/K order) at the tp > 1.
        folder = os.path.join(self.tmp.name, name + "-hf")
        write_folder(gguf, hf_tensors(gguf), folder, rope_scaling=case["hf_rope_scaling"])
        runs = [(path, tp, "gguf") for tp in case["tp"]] + [(folder, case["tp"][-1], "hf")]
        for model, tp, form in runs:
            start = time.monotonic()
            label = "%s %s tp=%d" % (name, form, tp)
            window = case.get("served_context")
            with tpserve_cluster.Cluster(self.args.bin_dir, model, tp=tp) as cluster:
                got, context, refused = self.score(cluster, tokens,
                                                   window + 1 if window else None)
            self.assertEqual(got.shape, want.shape, label)
            diff = np.abs(got - want).max()
            top1 = np.mean(got.argmax(axis=1) == want.argmax(axis=1))
            print("%s: max |logit difference| %.2e, top-1 agreement %.0f%%, %.1f s"
                  % (label, diff, 100 * top1, time.monotonic() - start), flush=True)
            self.assertLess(diff, TOLERANCE, label)
            self.assertEqual(top1, 1.0, label)
            if window:
                self.assertEqual(context, window, label)
                self.assertIsNotNone(refused, "a prompt one past the context was scored")
                self.assertIn("context length is %d" % window, refused.details())

    def test_llama3_rope(self):
        self.check_family("llama3_rope")

    def test_qwen2_tied(self):
        self.check_family("qwen2_tied")

    def test_qwen2_untied_linear_rope(self):
        self.check_family("qwen2_untied_linear_rope")

    def test_mistral(self):
        self.check_family("mistral")

    def test_qwen3(self):
        self.check_family("qwen3")

    def test_phi3(self):
        self.check_family("phi3")

    def test_gemma3(self):
        self.check_family("gemma3")

    def test_mistral_nemo(self):
        self.check_family("mistral_nemo")


if __name__ == "__main__":
    tpserve_cluster.run_tests()

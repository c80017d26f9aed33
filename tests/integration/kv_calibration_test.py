"""kv_calibration: tpserve-calibrate-kv measures a GGUF model's FP8 KV-cache scales over a text and
writes them into a copy of the model, which --kv-cache-dtype fp8 then stores K and V at.

The scales are checked against hf_reference's float64 NumPy model run over the same tokens (the
text encoded by HF's `tokenizers` from a tokenizer.json written by hf_writer, independent of
tpserve's tokenizer), in the same chunks: max |K after RoPE| / 448 and max |V| / 448 per layer and
KV head (or per layer), within 1e-4 with fp32 weights and 6% with the packed weights' 8-bit
activations (3.9% seen). The copy keeps every other key and tensor byte for byte. Served at tp 3
(one KV head a rank) with an FP8 KV cache, it gives the logits of the NumPy model whose cache is
rounded by ml_dtypes at those scales. A folder, an empty text, a chunk longer than the context and an output
that is the input are refused, naming what is wrong.
"""

import json
import os
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpserve_cluster  # noqa: E402
from gguf_reader import Gguf  # noqa: E402
from hf_reference import HfConfig, default_inv_freq, fp8_kv_cache, reference_logits  # noqa: E402
from hf_writer import tokenizer_files  # noqa: E402

CHUNK = 64
TEXT = " ".join([
    "Tensor parallelism splits every layer of a model across devices.",
    "Each rank holds a slice of the attention heads and of the feed-forward width,",
    "and the ranks sum their partial outputs with an all-reduce after each block.",
    "The KV cache stores, for every token a sequence has seen, its keys and values;",
    "an FP8 cache halves their bytes, so twice the tokens fit in the same memory.",
    "Numbers such as 3.14159, 2.71828 and 1,000,000 tokenize digit by digit.",
    "def attention(q, k, v):\n    return softmax(q @ k.T / sqrt(d)) @ v\n",
    "Café, naïve, 東京, and emoji 🚀 are bytes the tokenizer must carry through.",
] * 2)


def rms(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


class KvCalibration(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from tokenizers import Tokenizer

        tpserve_cluster.set_up_scratch(cls, "tpserve-kv-calibration-")
        cls.gguf = Gguf(cls.args.model)
        cls.config = HfConfig(cls.gguf)
        cls.inv_freq = default_inv_freq(cls.config.theta, cls.config.head_dim)
        cls.text = os.path.join(cls.tmp.name, "calibration.txt")
        with open(cls.text, "w", encoding="utf-8") as f:
            f.write(TEXT)
        tokenizer_json, _ = tokenizer_files(cls.gguf)
        ids = Tokenizer.from_str(json.dumps(tokenizer_json)).encode(
            TEXT, add_special_tokens=False).ids
        cls.tokens = ids
        # The tool's chunks: CHUNK tokens, each led by BOS when the model asks for it.
        bos = ([cls.gguf.metadata["tokenizer.ggml.bos_token_id"]]
               if cls.gguf.metadata["tokenizer.ggml.add_bos_token"] else [])
        text_per_chunk = CHUNK - len(bos)
        chunks = [bos + ids[b:b + text_per_chunk] for b in range(0, len(ids), text_per_chunk)]
        # The reference's amax: [layers, kv_heads] for K and V, over the same chunks.
        layers, kv_heads = cls.config.layers, cls.config.kv_heads
        cls.k_amax, cls.v_amax = np.zeros((layers, kv_heads)), np.zeros((layers, kv_heads))

        def measure(layer, k, v):
            cls.k_amax[layer] = np.maximum(cls.k_amax[layer], np.abs(k).max(axis=(1, 2)))
            cls.v_amax[layer] = np.maximum(cls.v_amax[layer], np.abs(v).max(axis=(1, 2)))
            return k, v

        for chunk in chunks:
            reference_logits(cls.gguf, chunk, cls.inv_freq, kv_cache=measure)
        print("%d calibration tokens in %d chunks" % (len(ids), len(chunks)), flush=True)

    def calibrate(self, name, *flags, text=None, chunk=CHUNK):
        """Runs the tool; returns (exit code, stderr, the output's path)."""
        out = os.path.join(self.tmp.name, name + ".gguf")
        result = subprocess.run(
            [os.path.join(self.args.bin_dir, "tpserve-calibrate-kv"), self.args.model, out,
             "--text", text or self.text, "--chunk-tokens", str(chunk), *flags],
            capture_output=True, text=True, timeout=300)
        return result.returncode, result.stderr, out

    def scales(self, path):
        g = Gguf(path)
        layers = self.config.layers
        k = np.array([g.tensors["blk.%d.k_cache_scale" % l] for l in range(layers)])
        v = np.array([g.tensors["blk.%d.v_cache_scale" % l] for l in range(layers)])
        return g, k, v

    def test_scales_are_the_numpy_models_max_over_448(self):
        for flags, per_layer, rtol in [(["--cpu-weights", "fp32"], False, 1e-4),
                                       (["--cpu-weights", "fp32", "--per-layer"], True, 1e-4),
                                       ([], False, 0.06)]:
            code, err, out = self.calibrate("calibrated-%d" % len(flags), *flags)
            self.assertEqual(code, 0, err)
            self.assertIn("over %d tokens" % len(self.tokens), err)
            g, k, v = self.scales(out)
            want_k, want_v = self.k_amax / 448, self.v_amax / 448
            if per_layer:
                want_k = np.repeat(want_k.max(axis=1, keepdims=True), self.config.kv_heads, 1)
                want_v = np.repeat(want_v.max(axis=1, keepdims=True), self.config.kv_heads, 1)
            worst = max(np.abs(k / want_k - 1).max(), np.abs(v / want_v - 1).max())
            print("%s: scales within %.2e of the NumPy model's" % (" ".join(flags) or "packed",
                                                                    worst), flush=True)
            np.testing.assert_allclose(k, want_k, rtol=rtol)
            np.testing.assert_allclose(v, want_v, rtol=rtol)
            # Everything else as it was.
            self.assertEqual(g.metadata, self.gguf.metadata)
            self.assertEqual(set(g.tensors) - set(self.gguf.tensors),
                             {"blk.%d.%s_cache_scale" % (l, kv) for l in range(self.config.layers)
                              for kv in "kv"})
            for name, values in self.gguf.tensors.items():
                np.testing.assert_array_equal(g.tensors[name], values, name)

    def test_fp8_kv_serves_at_the_calibrated_scales(self):
        code, err, out = self.calibrate("served", "--cpu-weights", "fp32")
        self.assertEqual(code, 0, err)
        _, k, v = self.scales(out)
        tokens = self.tokens[:48]
        want = reference_logits(self.gguf, tokens, self.inv_freq,
                                kv_cache=fp8_kv_cache(lambda l: k[l], lambda l: v[l]))
        at_one = reference_logits(self.gguf, tokens, self.inv_freq,
                                  kv_cache=fp8_kv_cache(lambda l: 1.0, lambda l: 1.0))
        with tpserve_cluster.Cluster(self.args.bin_dir, out, tp=3, extra_args=[
                "--kv-cache-dtype", "fp8", "--cpu-weights", "fp32"]) as cluster:
            got = tpserve_cluster.score_logits(self.protos, cluster, tokens)
            with open(cluster.log_path, encoding="utf-8", errors="replace") as f:
                log = f.read()
        print("calibrated GGUF, FP8 KV, tp=3: RMS logit difference %.4f from the NumPy cache at "
              "its scales, %.4f from the one at scale 1" % (rms(got, want), rms(got, at_one)),
              flush=True)
        self.assertIn("KV-cache scales from the model for %d of %d layers"
                      % (self.config.layers, self.config.layers), log)
        self.assertLess(rms(got, want), rms(got, at_one) / 2)

    def test_what_cannot_be_calibrated_is_named(self):
        empty = os.path.join(self.tmp.name, "empty.txt")
        open(empty, "w").close()
        code, err, _ = self.calibrate("empty", text=empty)
        self.assertEqual(code, 1)
        self.assertIn("the calibration text has no tokens", err)
        code, err, _ = self.calibrate("long", chunk=100000)
        self.assertEqual(code, 1)
        self.assertIn("chunks of 100000 tokens: between 1 and the model's context (8192)", err)
        result = subprocess.run(
            [os.path.join(self.args.bin_dir, "tpserve-calibrate-kv"), self.args.model,
             self.args.model, "--text", self.text],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertIn("the output is the input", result.stderr)
        result = subprocess.run(
            [os.path.join(self.args.bin_dir, "tpserve-calibrate-kv"), self.tmp.name,
             os.path.join(self.tmp.name, "x.gguf"), "--text", self.text],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1)
        self.assertIn("is a folder: a GGUF file is calibrated here", result.stderr)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

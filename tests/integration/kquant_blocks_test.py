"""kquant_blocks: Q4_K, Q5_K and Q6_K weights served from their blocks, against NumPy.

tpserve-mkmodel writes a Q4_K_M-shaped and a Q5_K_M-shaped model (Q4_K or Q5_K, with Q6_K for the
output and for attn_v and ffn_down of even layers) and their Q4_0 twin (the same values before
quantization). gguf_reader
decodes both from ggml's published block formats and hf_reference computes their logits in
float64. tpserve then serves each:
- with --cpu-weights fp32 (weights decoded at load, products in fp32), at tp 1 and 2: within 1e-3
  of the reference, top-1 everywhere, as logits_families requires of fp32 models;
- with its packed weights (the default: blocks kept, activations rounded to 8 bits per 32, as
  llama.cpp's CPU backend), at tp 1 and 2: no further from the reference than the Q4_0 twin's
  packed path is from its own (activation rounding is the only error either adds), and its
  resident weight bytes (AdminService weight_bytes, tp 1) within 5% of the file's tensor bytes,
  where the fp32 path holds more than 5 times as many (3.5 at tp 2, where one matrix's slices
  cut blocks).
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
from hf_reference import HfConfig, default_inv_freq, reference_logits  # noqa: E402

FP32_TOLERANCE = 1e-3
PROMPT_LENGTH = 24
SHAPE = ["--layers", "2", "--hidden", "256", "--ffn", "512", "--heads", "4", "--kv-heads", "2",
         "--vocab", "512", "--context", "256", "--seed", "5"]
# F32, Q4_0, Q4_K, Q5_K, Q6_K
BYTES_PER_ELEMENT = {0: 4.0, 2: 18 / 32, 12: 144 / 256, 13: 176 / 256, 14: 210 / 256}


class KquantBlocks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-kquant-")

    def make(self, dtype):
        path = os.path.join(self.tmp.name, dtype + ".gguf")
        subprocess.run([os.path.join(self.args.bin_dir, "tpserve-mkmodel"), "--output", path,
                        "--dtype", dtype] + SHAPE, check=True, capture_output=True, timeout=60)
        gguf = Gguf(path)
        tokens = [int(t) for t in np.random.default_rng(9).integers(3, 512, PROMPT_LENGTH)]
        want = reference_logits(gguf, tokens, default_inv_freq(HfConfig(gguf).theta,
                                                              HfConfig(gguf).head_dim))
        tensor_bytes = sum(values.size * BYTES_PER_ELEMENT[gguf.types[name]]
                           for name, values in gguf.tensors.items())
        return path, gguf, tokens, want, tensor_bytes

    def serve(self, path, tokens, tp, weights):
        """The logits of `tokens` and rank 0's resident weight bytes."""
        import grpc

        admin_pb = self.protos.admin_pb2
        with tpserve_cluster.Cluster(self.args.bin_dir, path, tp=tp,
                                     extra_args=["--cpu-weights", weights]) as cluster:
            logits = tpserve_cluster.score_logits(self.protos, cluster, tokens)
            with grpc.insecure_channel(cluster.admin_address) as channel:
                admin = self.protos.admin_pb2_grpc.AdminServiceStub(channel)
                status = admin.ClusterStatus(admin_pb.ClusterStatusRequest(), timeout=30)
        return logits, status.shards[0].weight_bytes

    def test_q4_k_m_served_from_blocks(self):
        self.check("q4_k_m", 12)

    def test_q5_k_m_served_from_blocks(self):
        self.check("q5_k_m", 13)

    def check(self, dtype, main_type):
        k_path, k_gguf, tokens, k_want, k_bytes = self.make(dtype)
        types = set(k_gguf.types.values())
        self.assertTrue({main_type, 14} <= types, "%s has its type and Q6_K: %s" % (dtype, types))
        q4_path, _, _, q4_want, _ = self.make("q4_0")

        q4_packed, _ = self.serve(q4_path, tokens, 1, "packed")
        q4_error = np.abs(q4_packed - q4_want).mean()
        print("Q4_0 twin, packed: mean |logit difference| %.3e" % q4_error, flush=True)
        for tp in (1, 2):
            start = time.monotonic()
            fp32, fp32_bytes = self.serve(k_path, tokens, tp, "fp32")
            diff = np.abs(fp32 - k_want).max()
            print("%s fp32 tp=%d: max |logit difference| %.2e (%.1f s)"
                  % (dtype, tp, diff, time.monotonic() - start), flush=True)
            self.assertLess(diff, FP32_TOLERANCE, "fp32 tp=%d" % tp)
            self.assertTrue((fp32.argmax(axis=1) == k_want.argmax(axis=1)).all(), "fp32 tp=%d" % tp)

            packed, packed_bytes = self.serve(k_path, tokens, tp, "packed")
            error = np.abs(packed - k_want).mean()
            top1 = np.mean(packed.argmax(axis=1) == k_want.argmax(axis=1))
            print("%s packed tp=%d: mean |logit difference| %.3e (Q4_0 twin %.3e), top-1 "
                  "%.0f%%, rank 0 holds %d weight bytes, the file's tensors %d, fp32 %d"
                  % (dtype, tp, error, q4_error, 100 * top1, packed_bytes, k_bytes, fp32_bytes),
                  flush=True)
            self.assertLess(error, 1.5 * q4_error, "packed tp=%d" % tp)
            if tp == 1:
                self.assertLess(abs(packed_bytes - k_bytes), 0.05 * k_bytes)
            # At tp 2 attn_output's 128-column slices cut Q4_K's 256-element blocks and are
            # decoded; the rest (ffn_down's 256 columns included) stays packed.
            self.assertGreater(fp32_bytes, (5 if tp == 1 else 3.5) * packed_bytes, "tp=%d" % tp)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

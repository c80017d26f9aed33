"""logits_llamacpp: each served architecture's packed path against llama.cpp on the same file.

tests/golden/logits_architectures_llamacpp.json (scripts/make-golden.py architectures) holds, for
a random-weight Q8_0 model of each architecture's shape (Qwen2's biases, Qwen3's q/k norms and
head size, Mistral Nemo's head size, Phi-3's fused matrices and window, Gemma 3's norms, GELU,
embedding scale and local and global layers), the tpserve-mkmodel arguments that write it, the file's
sha256, and llama.cpp's top-20 logits of every position of two prompts, computed by llama.cpp's
own CPU kernels (Q8_0 weights against activations rounded to 8 bits per 32-value block, F32 KV
cache). The test writes the same file again (its sha256 must match: the golden is of these
bytes), serves it at tp 1 and tp 2 on tpserve's packed path with 8-bit activations
(--cpu-weights packed: llama.cpp's rounding, not bit for bit; models this small default to 16-bit
activations) and compares, at llama.cpp's top-20 ids of each position:

- the largest |logit difference|, against llama.cpp's own tolerance: its 8-bit run strays from
  the model's exact function by some amount (0.04 to 0.07 on these files), which the same file
  through tpserve's fp32 path (--cpu-weights fp32: the weights decoded, no activation rounding,
  the path logits_families checks against NumPy to 5e-6) measures; the packed path may differ
  from llama.cpp by at most 1.5 times that, and by 0.15 at most;
- the greedy choice at each position, which must agree wherever llama.cpp's top two are more
  than that spread apart.
"""

import hashlib
import json
import os
import subprocess
import unittest

import numpy as np

import tpserve_cluster

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden",
                      "logits_architectures_llamacpp.json")
ABSOLUTE_BAR = 0.15
SPREAD_FACTOR = 1.5


def largest_difference(got, prompt):
    """max over positions and llama.cpp's top-20 ids of |ours - llama.cpp's|."""
    worst = 0.0
    for row, top in zip(got, prompt["top"]):
        for token, logit in top:
            worst = max(worst, abs(row[token] - logit))
    return worst


class LogitsLlamaCpp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-llamacpp-")
        with open(GOLDEN, encoding="utf-8") as f:
            cls.golden = json.load(f)

    def score_all(self, path, tp, extra_args=()):
        with tpserve_cluster.Cluster(self.args.bin_dir, path, tp=tp,
                                     extra_args=list(extra_args)) as cluster:
            return [tpserve_cluster.score_logits(self.protos, cluster, prompt["ids"])
                    for prompt in self.case["prompts"]]

    def check(self, name):
        self.case = self.golden[name]
        path = os.path.join(self.tmp.name, name + ".gguf")
        subprocess.run([os.path.join(self.args.bin_dir, "tpserve-mkmodel"), "--output", path]
                       + self.case["mkmodel"], check=True, capture_output=True, timeout=60)
        with open(path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), self.case["sha256"],
                             "tpserve-mkmodel writes other bytes than the golden's: run "
                             "scripts/make-golden.py architectures")
        prompts = self.case["prompts"]
        exact = self.score_all(path, 1, ["--cpu-weights", "fp32"])
        spread = max(largest_difference(g, p) for g, p in zip(exact, prompts))
        bar = min(SPREAD_FACTOR * spread, ABSOLUTE_BAR)
        print("%s: fp32 path vs llama.cpp's 8-bit run %.4f" % (name, spread), flush=True)
        for tp in (1, 2):
            packed = self.score_all(path, tp, ["--cpu-weights", "packed"])
            worst = max(largest_difference(g, p) for g, p in zip(packed, prompts))
            agree = total = 0
            for got, prompt in zip(packed, prompts):
                for row, top in zip(got, prompt["top"]):
                    if top[0][1] - top[1][1] > spread:
                        total += 1
                        agree += int(np.argmax(row) == top[0][0])
            print("%s packed tp=%d: largest |difference| %.4f (bar %.4f), greedy %d of %d "
                  "clear positions" % (name, tp, worst, bar, agree, total), flush=True)
            self.assertLessEqual(worst, bar, "%s tp=%d" % (name, tp))
            self.assertEqual(agree, total, "%s tp=%d" % (name, tp))
            self.assertGreater(total, 0)

    def test_qwen2(self):
        self.check("qwen2")

    def test_qwen3(self):
        self.check("qwen3")

    def test_mistral_nemo(self):
        self.check("mistral_nemo")

    def test_phi3(self):
        self.check("phi3")

    def test_gemma3(self):
        self.check("gemma3")


if __name__ == "__main__":
    tpserve_cluster.run_tests()

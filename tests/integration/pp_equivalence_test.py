"""pp_equivalence: pipeline stages compute what one rank computes. The bundled model with
--cpu-weights fp32 served by P pipeline stages of T tensor-parallel ranks (P in {2, 3}, T in
{1, 3}: 2, 3, 6 and 9 worker processes, each stage a balanced share of the 30 layers) gives the
Score logits of one rank within 1e-4 (100 tokens, prefilled in chunks), and the same greedy texts
for 20 prompts sent at once,
with n = 2 on a quarter of them, under chunked prefill (--max-num-batched-tokens 48) and
preemption (a 24-block pool, so that the requests evict each other). `tpctl status` names each
rank's stage and tensor-parallel rank. Real processes on 127.0.0.1, ports chosen at run time.

    pp_equivalence_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import concurrent.futures
import os
import subprocess
import unittest

import numpy as np

import tpserve_cluster

TOLERANCE = 1e-4
MAX_TOKENS = 16
SERVING = ["--cpu-weights", "fp32", "--max-num-batched-tokens", "48", "--kv-cache-blocks", "24"]
PROMPTS = ["The capital of France is", "Once upon a time, in a land far away,",
           "def fibonacci(n):", "The three primary colours are", "Water boils at",
           "A haiku about autumn:", "The largest planet in the solar system is",
           "To make bread you need", "Photosynthesis is the process by which",
           "The quick brown fox", "In 1492, Columbus", "The square root of 144 is",
           "My favourite book is", "Rivers flow into", "The first law of thermodynamics states",
           "import numpy as np\n", "Dear Sir or Madam,", "The recipe calls for two cups of",
           "Mount Everest is located in", "Chess is a game in which two players"]


def complete(cluster, prompt, n):
    body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "n": n}
    return [c["text"] for c in tpserve_cluster.post_json(cluster, "/v1/completions", body)["choices"]]


class PipelineEquivalence(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-pp-")
        vocab = 49152
        cls.tokens = [int(t) for t in np.random.default_rng(5).integers(3, vocab, 100)]  # 3 chunks
        cls.reference = cls.serve(cls, stages=1, tp=1)

    def serve(self, stages, tp):
        """Score logits of self.tokens, every prompt's greedy texts and the preemption count."""
        with tpserve_cluster.Cluster(self.args.bin_dir, self.args.model, tp=tp,
                                     extra_args=SERVING + ["--pipeline-parallel-size",
                                                           str(stages)]) as cluster:
            logits = tpserve_cluster.score_logits(self.protos, cluster, self.tokens)
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
                texts = list(pool.map(lambda i: complete(cluster, PROMPTS[i], 2 if i % 4 == 0 else 1),
                                      range(len(PROMPTS))))
            status = subprocess.run([os.path.join(self.args.bin_dir, "tpctl"), "--coordinator",
                                     cluster.admin_address, "status"], capture_output=True,
                                    text=True, timeout=30, check=True).stdout
            preempted = tpserve_cluster.metric_totals(cluster, "num_preemptions")["num_preemptions"]
            return logits, texts, preempted, status

    def check(self, stages, tp):
        want_logits, want_texts, _, _ = self.reference
        logits, texts, preempted, status = self.serve(stages, tp)
        diff = np.abs(logits - want_logits).max()
        print("P=%d T=%d: max |logit difference| %.2e, %d preemptions" % (stages, tp, diff,
                                                                        preempted), flush=True)
        self.assertLess(diff, TOLERANCE)
        np.testing.assert_array_equal(logits.argmax(axis=1), want_logits.argmax(axis=1))
        for i, (got, want) in enumerate(zip(texts, want_texts)):
            self.assertEqual(got, want, PROMPTS[i])
        self.assertGreater(preempted, 0)
        for rank in range(stages * tp):
            self.assertRegex(status, r"(?m)^%d\s+\S+\s+.*\b%d/%d\s+%d/%d\b" % (
                rank, rank // tp, stages, rank % tp, tp))

    def test_two_stages_of_one_rank(self):
        self.check(2, 1)

    def test_three_stages_of_one_rank(self):
        self.check(3, 1)

    def test_two_stages_of_three_ranks(self):
        self.check(2, 3)

    def test_three_stages_of_three_ranks(self):
        self.check(3, 3)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

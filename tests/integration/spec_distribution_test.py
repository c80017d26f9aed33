"""spec_distribution: speculative decoding keeps the target's sampling distribution, with n-gram
proposals (point masses) and with a draft model (proposals drawn from its own distribution q, the
model at Q4_0 by tpserve-quantize). At temperature 0.8 with fixed seeds, the first three generated
tokens of a prompt that repeats itself (so that proposals come and are often accepted, and often
not) are drawn TPSERVE_SPEC_SAMPLES times (default 2000; the issue's full form is 5000) with
--speculative ngram, with --speculative draft and without; a chi-square test of homogeneity over the three-token texts
(rare ones pooled) must not tell the two apart (p > 0.01). Real processes on 127.0.0.1, ports
chosen at run time.

    spec_distribution_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import collections
import concurrent.futures
import math
import os
import sys
import unittest

import tpserve_cluster

SAMPLES = int(os.environ.get("TPSERVE_SPEC_SAMPLES", "2000"))
PROMPT = "one two three four one two three four one two three four one two"
N = 16  # samples per request (the server's most)


def chi2_survival(x, df):
    """P(X > x) for X ~ chi-square(df): the regularized upper incomplete gamma Q(df/2, x/2),
    by its series below a + 1 and its continued fraction above."""
    a, x = df / 2.0, x / 2.0
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = 0
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= x / (a + n)
            total += term
        return 1.0 - total * math.exp(log_front)
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = d if abs(d) > tiny else tiny
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h


def homogeneity_p(first, second, min_expected=5.0):
    """Chi-square test that two samples of categories come from one distribution; categories
    whose pooled expected count is below min_expected in either sample are pooled into one."""
    n1, n2 = sum(first.values()), sum(second.values())
    total = n1 + n2
    kept, rest1, rest2 = [], 0, 0
    for key in set(first) | set(second):
        a, b = first.get(key, 0), second.get(key, 0)
        if min(n1, n2) * (a + b) / total >= min_expected:
            kept.append((a, b))
        else:
            rest1, rest2 = rest1 + a, rest2 + b
    if rest1 + rest2 > 0:
        kept.append((rest1, rest2))
    statistic = 0.0
    for a, b in kept:
        for observed, n in ((a, n1), (b, n2)):
            expected = n * (a + b) / total
            statistic += (observed - expected) ** 2 / expected
    return chi2_survival(statistic, len(kept) - 1), len(kept)


def draw(cluster, seed):
    body = {"prompt": PROMPT, "n": N, "max_tokens": 3, "temperature": 0.8, "seed": seed,
            "ignore_eos": True}
    answer = tpserve_cluster.post_json(cluster, "/v1/completions", body)
    return [choice["text"] for choice in answer["choices"]]


def counters(cluster):
    return tpserve_cluster.metric_totals(cluster, r"spec_decode_\w+")


class SpecDistribution(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-spec-dist-")
        cls.plain = None  # drawn once, for both methods

    def plain_texts(self):
        if self.plain is None:
            type(self).plain = self.sample([])[0]
        return self.plain

    def sample(self, extra_args):
        args = tpserve_cluster.parsed_args()
        # 8-bit activations: the distribution speculation must keep is the model's at any
        # precision, and these products are the cheapest (16 bits would double this test's time).
        extra_args = ["--cpu-weights", "packed"] + list(extra_args)
        with tpserve_cluster.Cluster(args.bin_dir, args.model, tp=1,
                                     extra_args=extra_args) as cluster:
            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
                batches = pool.map(lambda s: draw(cluster, s), range(0, SAMPLES, N))
                texts = collections.Counter(t for batch in batches for t in batch)
            return texts, counters(cluster)

    def check(self, method, speculative):
        plain = self.plain_texts()
        # Every one of the 16 samples decodes at once: let them all propose.
        speculated, spec = self.sample(speculative + ["--spec-disable-batch-size", "64"])
        self.assertGreater(spec["spec_decode_num_accepted_tokens"], SAMPLES // 10)
        self.assertLess(spec["spec_decode_num_accepted_tokens"],
                        spec["spec_decode_num_draft_tokens"])
        p, categories = homogeneity_p(plain, speculated)
        print("spec_distribution %s: %d samples each, %d categories, p = %.3f; %d of %d proposed "
              "tokens accepted" % (method, SAMPLES, categories, p,
                                   spec["spec_decode_num_accepted_tokens"],
                                   spec["spec_decode_num_draft_tokens"]), file=sys.stderr)
        self.assertGreaterEqual(categories, 5)
        self.assertGreater(p, 0.01, (plain.most_common(10), speculated.most_common(10)))

    def test_ngram_keeps_the_distribution(self):
        self.check("ngram", ["--speculative", "ngram"])

    def test_draft_keeps_the_distribution(self):
        self.check("draft", tpserve_cluster.make_draft_model(self))

    def test_the_test_tells_different_distributions_apart(self):
        # The same machinery on a shifted distribution must fail, or it proves nothing.
        base = collections.Counter({"a": 500, "b": 300, "c": 150, "d": 50})
        shifted = collections.Counter({"a": 400, "b": 340, "c": 190, "d": 70})
        self.assertLess(homogeneity_p(base, shifted)[0], 0.01)
        self.assertGreater(homogeneity_p(base, base)[0], 0.99)
        self.assertAlmostEqual(chi2_survival(3.841, 1), 0.05, places=3)
        self.assertAlmostEqual(chi2_survival(18.307, 10), 0.05, places=3)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

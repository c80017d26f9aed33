"""spec_greedy_identical: speculative decoding is lossless at temperature 0, with n-gram
proposals (--speculative ngram), with a draft model (--speculative draft: the model at Q4_0,
written by tpserve-quantize) and self-speculative (--speculative self: the model's first layers):
20 prompts sent together, and the first TPSERVE_SPEC_ALONE of them one at a time (default 6; the
full form is TPSERVE_SPEC_ALONE=20), give the same tokens as without speculation, at tp 1 and tp
3, with the prefix cache on, n = 2, stop strings, and under preemption (a 20-block pool, so that
concurrent requests preempt each other). The proposals must have been verified and
accepted somewhere (the server's spec_decode counters, which `tpctl status` shows too), or the
test would prove nothing.
Real processes on 127.0.0.1, ports chosen at run time.

    spec_greedy_identical_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import concurrent.futures
import os
import subprocess
import unittest

import tpserve_cluster

ARGS = tpserve_cluster.parsed_args
ALONE = int(os.environ.get("TPSERVE_SPEC_ALONE", "6"))

PASSAGE = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins "
           "with a single step. All that glitters is not gold. Fortune favours the bold.")
CODE = "def add(a, b):\n    total = a + b\n    return total\n\nprint(add(2, 3))\n"
PROMPTS = (
    ["Repeat this text exactly: " + PASSAGE,
     "Copy the following sentence twice: " + PASSAGE[:80],
     "Rewrite the function with type hints:\n" + CODE,
     "Fix the typo and repeat the rest unchanged: The quick brwn fox jumps over the lazy dog.",
     "List the words of this sentence, one per line: " + PASSAGE[:60],
     "Quote the second sentence of: " + PASSAGE,
     "Translate to French, then repeat the English: A journey of a thousand miles.",
     "Echo: 1 2 3 4 5 6 7 8 9 10 11 12",
     "Write the alphabet in capitals, separated by commas.",
     "Count from one to twenty in words."]
    + ["Tell me about %s." % topic for topic in
       ["the moon", "bread", "rivers", "chess", "the ocean", "trains", "music", "winter",
        "volcanoes", "libraries"]])


def metrics(cluster):
    return tpserve_cluster.metric_totals(cluster, r"spec_decode_\w+|num_preemptions")


def complete(cluster, prompt, **fields):
    body = dict({"messages": [{"role": "user", "content": prompt}], "temperature": 0,
                 "max_tokens": 96}, **fields)
    answer = tpserve_cluster.post_json(cluster, "/v1/chat/completions", body)
    return [(c["message"]["content"], c["finish_reason"]) for c in answer["choices"]]


def run_all(cluster):
    """Each prompt's choices: alone (the first ALONE), with n = 2, with a stop string, and all 20
    at once."""
    out = {}
    for i, prompt in enumerate(PROMPTS):
        if i < ALONE:
            out[("alone", i)] = complete(cluster, prompt)
        if i % 4 == 0:
            out[("n2", i)] = complete(cluster, prompt, n=2)
        if i % 4 == 1:
            out[("stop", i)] = complete(cluster, prompt, stop=[" the", "."])
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
        together = list(pool.map(lambda p: complete(cluster, p), PROMPTS))
    for i, choices in enumerate(together):
        out[("together", i)] = choices
    return out


class SpecGreedyIdentical(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-spec-")
        cls.ngram = ["--speculative", "ngram"]
        cls.draft = tpserve_cluster.make_draft_model(cls)
        cls.plain = {}  # (tp, extra) -> outputs without speculation, run once for both methods

    def outputs(self, tp, speculative, extra=(), model=None):
        # 8-bit activations: what speculation may not change is the same at any precision, and
        # these are the cheapest products (16 bits would double this test's share of CI).
        args = ["--cpu-weights", "packed"] + list(extra) + speculative
        with tpserve_cluster.Cluster(ARGS().bin_dir, model or ARGS().model, tp=tp,
                                     extra_args=args) as cluster:
            out = run_all(cluster)
            counters = metrics(cluster)
            status = subprocess.run([os.path.join(ARGS().bin_dir, "tpctl"), "--coordinator",
                                     cluster.admin_address, "status"], capture_output=True,
                                    text=True, timeout=30, check=True).stdout
            if speculative:
                # tpctl shows the acceptance the metrics count.
                self.assertIn("speculative decoding: %d of %d proposed tokens accepted" % (
                    counters["spec_decode_num_accepted_tokens"],
                    counters["spec_decode_num_draft_tokens"]), status)
            else:
                self.assertNotIn("speculative", status)
            return out, counters

    def check(self, tp, speculative, extra=(), model=None):
        key = (tp, tuple(extra), model)
        if key not in self.plain:
            self.plain[key] = self.outputs(tp, [], extra, model)[0]
        plain = self.plain[key]
        speculated, counters = self.outputs(tp, speculative, extra, model)
        for key in plain:
            self.assertEqual(speculated[key], plain[key], key)
        self.assertGreater(counters["spec_decode_num_drafts"], 0)
        self.assertGreater(counters["spec_decode_num_accepted_tokens"], 0)
        return counters

    def test_ngram_tp1(self):
        counters = self.check(1, self.ngram)
        # Input-grounded prompts: most proposals are the text being copied.
        self.assertGreater(counters["spec_decode_num_accepted_tokens"],
                           counters["spec_decode_num_draft_tokens"] // 4)

    def test_ngram_tp3(self):
        self.check(3, self.ngram)

    def test_ngram_one_token_suffixes_eight_proposals(self):
        # The setting docs/PERFORMANCE.md measures for input-grounded answers, passed through the
        # tpserve launcher: more and longer proposals, still the same output.
        self.check(1, self.ngram + ["--ngram-min", "1", "--num-speculative-tokens", "8"])

    def test_ngram_under_preemption(self):
        counters = self.check(1, self.ngram, ["--kv-cache-blocks", "20"])
        self.assertGreater(counters["num_preemptions"], 0)

    def test_draft_tp1(self):
        counters = self.check(1, self.draft)
        # The draft is the model more coarsely rounded: it often agrees (42% of its proposals
        # accepted when written), but not always.
        self.assertGreater(counters["spec_decode_num_accepted_tokens"],
                           counters["spec_decode_num_draft_tokens"] // 4)
        self.assertLess(counters["spec_decode_num_accepted_tokens"],
                        counters["spec_decode_num_draft_tokens"])

    def test_draft_that_is_the_model(self):
        # Its own draft: every proposal is accepted, including where the step verifies fewer
        # than were proposed (max_tokens near) and the token after them is the next proposal.
        counters = self.check(1, ["--speculative", "draft", "--draft-model", ARGS().model])
        self.assertEqual(counters["spec_decode_num_accepted_tokens"],
                         counters["spec_decode_num_draft_tokens"])

    def test_draft_tp3(self):
        self.check(3, self.draft)

    def test_draft_under_preemption(self):
        counters = self.check(1, self.draft, ["--kv-cache-blocks", "20"])
        self.assertGreater(counters["num_preemptions"], 0)

    # The model was not trained to exit early: a draft of its first 20 of 30 layers is seldom
    # right, so requests keep speculating however much is rejected.
    SELF = ["--speculative", "self", "--self-spec-layers", "20", "--spec-min-acceptance", "0"]

    def test_self_tp1(self):
        self.check(1, self.SELF)

    def test_self_tp3(self):
        self.check(3, self.SELF)

    def test_self_under_preemption(self):
        counters = self.check(1, self.SELF, ["--kv-cache-blocks", "20"])
        self.assertGreater(counters["num_preemptions"], 0)

    def test_self_draft_is_the_first_layers(self):
        # A model whose last two of four layers add nothing (o_proj and down_proj zero): its first
        # two layers, final norm and head compute its logits exactly, so a draft of two layers
        # proposes what it picks, every time; a draft of one layer does not.
        folder = self.model_with_idle_layers(layers=4, idle_from=2)
        counters = self.check(1, ["--speculative", "self", "--self-spec-layers", "2"],
                              model=folder)
        self.assertEqual(counters["spec_decode_num_accepted_tokens"],
                         counters["spec_decode_num_draft_tokens"])
        counters = self.check(1, ["--speculative", "self", "--self-spec-layers", "1"],
                              model=folder)
        self.assertLess(counters["spec_decode_num_accepted_tokens"],
                        counters["spec_decode_num_draft_tokens"])

    def model_with_idle_layers(self, layers, idle_from):
        """A small random model with the bundled tokenizer (tpserve-mkmodel, fp32) as a Hugging Face
        folder (hf_writer) in which the layers from `idle_from` on write nothing to the residual."""
        from gguf_reader import Gguf
        from hf_writer import hf_tensors, write_folder

        path = os.path.join(self.tmp.name, "small.gguf")
        subprocess.run([os.path.join(ARGS().bin_dir, "tpserve-mkmodel"), "--output", path,
                        "--layers", str(layers), "--hidden", "64", "--heads", "4", "--kv-heads",
                        "2", "--ffn", "128", "--vocab-from", ARGS().model, "--dtype", "f32",
                        "--seed", "11"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        gguf = Gguf(path)
        tensors = hf_tensors(gguf)
        for layer in range(idle_from, layers):
            for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
                tensors["model.layers.%d.%s" % (layer, name)][:] = 0
        folder = os.path.join(self.tmp.name, "idle-layers")
        write_folder(gguf, tensors, folder)
        return folder


if __name__ == "__main__":
    tpserve_cluster.run_tests()

"""spec_rollback: after many rejected proposals, nothing speculation wrote is left behind. Sampled
requests at temperature 1.0 over prompts that repeat themselves (n-gram proposals come often, and
sampling rejects many of them; the draft model, the model at Q4_0, is rejected where sampling
strays from it) run on a speculating server; afterwards no KV block is held, and every prefix the
radix tree kept for them is what recomputing gives: each request's prompt and output, sent again
as a prompt, is served from the cache and continues with the same greedy tokens and the same
log-probabilities, to the bit, as on a server that recomputes everything (no prefix cache, no
speculation): the CPU kernels give a row the same bits whatever step computes it.
Real processes on 127.0.0.1, ports chosen at run time.

    spec_rollback_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import concurrent.futures
import time
import unittest

import grpc

import tpserve_cluster

ARGS = tpserve_cluster.parsed_args

PROMPTS = ["one two three four one two three four one two three four one two",
           "red green blue red green blue red green blue red green",
           "a b c d e a b c d e a b c d e a b",
           "Monday Tuesday Wednesday Monday Tuesday Wednesday Monday Tuesday",
           "<|im_start|>user\nRepeat: the cat sat on the mat, the cat sat on the mat.<|im_end|>\n"
           "<|im_start|>assistant\n",
           "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2",
           "to be or not to be, to be or not to be, to be or",
           "la la la la la la la la la la la la"]
MAX_TOKENS = 64
CONTINUE = 6  # greedy tokens compared after each request's cached text
RPC_TIMEOUT_S = 300


class Server:
    """A cluster with stubs for its client and admin ports."""

    def __init__(self, test_class, extra_args):
        self.protos = test_class.protos
        self.cluster = tpserve_cluster.start_class_cluster(test_class, 1, extra_args)
        self.channel = grpc.insecure_channel(self.cluster.grpc_address)
        self.admin_channel = grpc.insecure_channel(self.cluster.admin_address)
        test_class.addClassCleanup(self.channel.close)
        test_class.addClassCleanup(self.admin_channel.close)
        self.inference = self.protos.inference_pb2_grpc.InferenceServiceStub(self.channel)
        self.admin = self.protos.admin_pb2_grpc.AdminServiceStub(self.admin_channel)

    def generate(self, **fields):
        """(token ids, logprobs, usage) of one sample."""
        ids, logprobs, usage = [], [], None
        request = self.protos.inference_pb2.GenerateRequest(**fields)
        for chunk in self.inference.Generate(request, timeout=RPC_TIMEOUT_S):
            ids += chunk.token_ids
            logprobs += chunk.logprobs
            if chunk.HasField("usage"):
                usage = chunk.usage
        return ids, logprobs, usage

    def status(self):
        return self.admin.ClusterStatus(self.protos.admin_pb2.ClusterStatusRequest(),
                                        timeout=30)

    def tokenize(self, text):
        return list(self.inference.Tokenize(self.protos.inference_pb2.TokenizeRequest(text=text),
                                            timeout=30).token_ids)


class SpecRollback(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-rollback-")
        cls.draft = tpserve_cluster.make_draft_model(cls)
        cls.reference = Server(cls, ["--no-prefix-cache"])

    def check(self, speculative):
        # Requests keep speculating however much is rejected.
        server = Server(type(self), speculative + ["--spec-min-acceptance", "0"])
        sampling = self.protos.inference_pb2.Sampling

        def sampled(i):
            prompt = server.tokenize(PROMPTS[i % len(PROMPTS)])
            ids, _, _ = server.generate(
                token_ids=self.protos.inference_pb2.TokenIds(ids=prompt), max_tokens=MAX_TOKENS,
                ignore_eos=True, sampling=sampling(temperature=1.0, seed=1000 + i))
            self.assertEqual(len(ids), MAX_TOKENS)
            return prompt, ids

        # At most --spec-disable-batch-size (8) at once, so that every step speculates; each
        # prompt twice, with other seeds.
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
            runs = list(pool.map(sampled, range(2 * len(PROMPTS))))

        status = server.status()
        rejected = status.spec_draft_tokens - status.spec_accepted_tokens
        print("spec_rollback %s: %d of %d proposed tokens rejected"
              % (speculative[1], rejected, status.spec_draft_tokens))
        self.assertGreater(rejected, 100)
        self.assertGreater(status.spec_accepted_tokens, 0)
        deadline = time.monotonic() + 30
        while (status.kv_blocks_used or status.num_requests_running) and time.monotonic() < deadline:
            time.sleep(0.2)
            status = server.status()
        self.assertEqual(status.kv_blocks_used, 0)
        self.assertEqual(status.num_requests_running, 0)
        self.assertGreater(status.kv_blocks_cached, 0)

        block = status.kv_block_size
        for prompt, output in runs:
            text = prompt + output
            fields = dict(max_tokens=CONTINUE, ignore_eos=True, logprobs=0, no_speculation=True,
                          sampling=sampling(temperature=0))
            cached_ids, cached_logprobs, usage = server.generate(
                token_ids=self.protos.inference_pb2.TokenIds(ids=text), **fields)
            # The cache served every whole block the request decoded, rejected proposals and all.
            self.assertGreaterEqual(usage.cached_prompt_tokens,
                                    (len(text) - 1) // block * block - block)
            self.assertGreater(usage.cached_prompt_tokens, len(prompt))
            fresh_ids, fresh_logprobs, usage = self.reference.generate(
                token_ids=self.protos.inference_pb2.TokenIds(ids=text), **fields)
            self.assertEqual(usage.cached_prompt_tokens, 0)
            self.assertEqual(cached_ids, fresh_ids)
            self.assertEqual([x.logprob for x in cached_logprobs],
                             [x.logprob for x in fresh_logprobs])

    def test_ngram(self):
        self.check(["--speculative", "ngram"])

    def test_draft(self):
        self.check(self.draft)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

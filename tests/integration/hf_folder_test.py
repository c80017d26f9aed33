"""hf_folder_equals_gguf: SmolLM2 served from a Hugging Face folder gives the GGUF file's logits.

The folder is written here from the bundled GGUF by code independent of tpserve's: the weights
decoded by gguf_reader (ggml's block formats), Q/K rows put back into HF's order (undoing
llama.cpp's converter permutation), saved in F32 with the `safetensors` package; config.json;
a tokenizer.json in HF's format that HF's own `tokenizers` loads and must encode as tpserve does
the GGUF file (which tokenizer_matches_llamacpp ties to llama.cpp); tokenizer_config.json with the
chat template and special tokens. tpserve serves the GGUF file with --cpu-weights fp32 (the same
decoded values) and the folder, as one file at tp 1 and sharded (an index over two files) at
tp 3: logits agree within 1e-4 and top-1 everywhere, texts tokenize alike, and a chat request
renders the same prompt and greedy answer. Broken folders (a missing shard, an unsupported
dtype, a shape that disagrees with config.json, a truncated file, a shard outside the folder, an
unknown architecture, an impossible head_dim, untied embeddings without lm_head, JSON nested
100,000 deep) each stop tpserve-generate with a line naming the file and the tensor or field.
generation_config.json's sampling is what requests that leave it out get, and every id of its
eos_token_id list ends generation. FP8 checkpoints (F8_E4M3 projections with per-channel or
per-tensor scales, as llm-compressor and ModelOpt write them) serve the logits of their weights
dequantized by ml_dtypes, and FP8 folders tpserve cannot read are refused naming why. A folder's
KV-cache scales (per KV head or per layer, under each of the names checkpoints use) are the ones
--kv-cache-dtype fp8 stores K and V at, at tp 1 and 3: the logits are those of hf_reference's model
with K and V rounded to E4M3 by ml_dtypes at those scales.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import unittest
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpserve_cluster  # noqa: E402
from gguf_reader import Gguf  # noqa: E402
from hf_reference import HfConfig, default_inv_freq, fp8_kv_cache, reference_logits  # noqa: E402
from hf_writer import fp8_tensors, hf_tensors, write_folder  # noqa: E402

TOLERANCE = 1e-4
PROMPT_LENGTH = 48
TEXTS = ["Hello, world!", "The capital of France is Paris.", "  spaces\tand\nnewlines  ",
         "digits 1234567 and 3.14159", "<|im_start|>user\nhi<|im_end|>", "naïve café 東京 🚀",
         "def f(x):\n    return x ** 2\n"]

class HfFolderEqualsGguf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-hf-")
        start = time.monotonic()
        cls.gguf = Gguf(cls.args.model)
        tensors = hf_tensors(cls.gguf)
        cls.folder = os.path.join(cls.tmp.name, "SmolLM2-hf")
        cls.sharded = os.path.join(cls.tmp.name, "SmolLM2-hf-sharded")
        write_folder(cls.gguf, tensors, cls.folder, shards=1)
        write_folder(cls.gguf, tensors, cls.sharded, shards=2)
        print("wrote the HF folders in %.1f s" % (time.monotonic() - start), flush=True)
        vocab = len(cls.gguf.metadata["tokenizer.ggml.tokens"])
        cls.tokens = [int(t) for t in np.random.default_rng(3).integers(3, vocab, PROMPT_LENGTH)]

    def serve(self, model, tp, extra_args=()):
        """Logits of self.tokens, the token ids of TEXTS, and a greedy chat answer with its
        prompt length, from a cluster serving `model`."""
        import grpc

        pb = self.protos.inference_pb2
        with tpserve_cluster.Cluster(self.args.bin_dir, model, tp=tp,
                                     extra_args=list(extra_args)) as cluster:
            logits = tpserve_cluster.score_logits(self.protos, cluster, self.tokens)
            with grpc.insecure_channel(cluster.grpc_address) as channel:
                grpc.channel_ready_future(channel).result(timeout=10)
                stub = self.protos.inference_pb2_grpc.InferenceServiceStub(channel)
                ids = [list(stub.Tokenize(pb.TokenizeRequest(text=t), timeout=30).token_ids)
                       for t in TEXTS]
                name = stub.ListModels(pb.ListModelsRequest(), timeout=30).models[0].id
            body = json.dumps({"model": name, "max_tokens": 12, "temperature": 0,
                               "messages": [{"role": "user", "content": "Name a fruit."}]})
            request = urllib.request.Request(cluster.http_url + "/v1/chat/completions",
                                             body.encode(), {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                chat = json.load(response)
        return logits, ids, (chat["usage"]["prompt_tokens"], chat["choices"][0]["message"])

    def test_folder_serves_the_gguf_models_logits(self):
        from tokenizers import Tokenizer

        start = time.monotonic()
        want_logits, want_ids, want_chat = self.serve(self.args.model, 1,
                                                      ["--cpu-weights", "fp32"])
        print("GGUF, fp32 weights: %.1f s" % (time.monotonic() - start), flush=True)
        hf = Tokenizer.from_file(os.path.join(self.folder, "tokenizer.json"))
        for text, ids in zip(TEXTS, want_ids):
            self.assertEqual(hf.encode(text, add_special_tokens=False).ids, ids,
                             "HF tokenizers and tpserve's GGUF tokenizer disagree on %r" % text)
        for folder, tp in [(self.folder, 1), (self.sharded, 3)]:
            start = time.monotonic()
            logits, ids, chat = self.serve(folder, tp)
            diff = np.abs(logits - want_logits).max()
            top1 = np.mean(logits.argmax(axis=1) == want_logits.argmax(axis=1))
            print("%s tp=%d: max |logit difference| %.2e, top-1 %.0f%%, %.1f s"
                  % (os.path.basename(folder), tp, diff, 100 * top1, time.monotonic() - start),
                  flush=True)
            self.assertEqual(logits.shape, want_logits.shape)
            self.assertLess(diff, TOLERANCE, folder)
            self.assertEqual(top1, 1.0, folder)
            self.assertEqual(ids, want_ids, folder)
            self.assertEqual(chat, want_chat, folder)

    def test_fp8_checkpoints_serve_their_dequantized_weights(self):
        tensors = hf_tensors(self.gguf)
        channel = {"quant_method": "compressed-tensors", "format": "float-quantized",
                   "config_groups": {"group_0": {
                       "targets": ["Linear"],
                       "weights": {"type": "float", "num_bits": 8, "strategy": "channel",
                                   "symmetric": True, "dynamic": False},
                       "input_activations": {"type": "float", "num_bits": 8,
                                             "strategy": "tensor", "dynamic": False}}},
                   "ignore": ["lm_head"]}
        modelopt = {"quant_method": "modelopt", "quant_algo": "FP8"}
        for tag, per_channel, quantization, shards, tp in [("channel", True, channel, 2, 3),
                                                           ("tensor", False, modelopt, 1, 1)]:
            checkpoint, dequantized = fp8_tensors(tensors, per_channel)
            fp8_folder = os.path.join(self.tmp.name, "fp8-" + tag)
            reference = os.path.join(self.tmp.name, "fp8-dequantized-" + tag)
            write_folder(self.gguf, checkpoint, fp8_folder, shards=shards,
                         quantization=quantization)
            write_folder(self.gguf, dequantized, reference)
            want, _, _ = self.serve(reference, 1)
            got, _, _ = self.serve(fp8_folder, tp)
            diff = np.abs(got - want).max()
            top1 = np.mean(got.argmax(axis=1) == want.argmax(axis=1))
            print("FP8 per-%s, %d file(s), tp=%d: max |logit difference| %.2e, top-1 %.0f%%"
                  % (tag, shards, tp, diff, 100 * top1), flush=True)
            self.assertLess(diff, TOLERANCE, tag)
            self.assertEqual(top1, 1.0, tag)

        checkpoint, _ = fp8_tensors(tensors, True)
        scale = "model.layers.3.mlp.down_proj.weight_scale"
        without_scale = {n: t for n, t in checkpoint.items() if n != scale}
        folder = os.path.join(self.tmp.name, "fp8-no-scale")
        write_folder(self.gguf, without_scale, folder, quantization=channel)
        self.assertIn("model.layers.3.mlp.down_proj.weight: is F8_E4M3, but "
                      "model.layers.3.mlp.down_proj.weight_scale is in no weight file",
                      self.generate_error(folder))
        stray = dict(checkpoint)
        stray["model.norm.weight_scale"] = np.array(1.0, dtype=np.float32)
        folder = os.path.join(self.tmp.name, "fp8-stray-scale")
        write_folder(self.gguf, stray, folder, quantization=channel)
        self.assertIn("model.norm.weight_scale scales model.norm.weight, which is not an F8_E4M3 "
                      "weight", self.generate_error(folder))
        block = json.loads(json.dumps(channel))
        block["config_groups"]["group_0"]["weights"]["strategy"] = "block"
        for case, quantization, want in [
                ("awq", {"quant_method": "awq", "bits": 4}, "quant_method awq"),
                ("block", block, "group group_0 has strategy block"),
                ("vllm-block", {"quant_method": "fp8", "weight_block_size": [128, 128]},
                 "has weight_block_size [128,128]")]:
            folder = os.path.join(self.tmp.name, "fp8-" + case)
            write_folder(self.gguf, checkpoint, folder, quantization=quantization)
            message = self.generate_error(folder)
            self.assertIn("config.json: quantization_config " + want, message, case)

    def test_calibrated_kv_cache_scales_are_the_ones_fp8_kv_stores_at(self):
        # Calibration as llm-compressor does it, on the prompt itself: per KV head for K
        # (compressed-tensors' attn_head strategy), per layer for V, scale = max |x| / 448.
        c = HfConfig(self.gguf)
        inv_freq = default_inv_freq(c.theta, c.head_dim)
        amax = {}

        def calibrate(layer, k, v):
            amax[layer] = (np.abs(k).max(axis=(1, 2)), np.abs(v).max())
            return k, v

        reference_logits(self.gguf, self.tokens, inv_freq, kv_cache=calibrate)
        k_scales = {layer: (a / 448).astype(np.float32) for layer, (a, _) in amax.items()}
        v_scales = {layer: np.array(a / 448, dtype=np.float32) for layer, (_, a) in amax.items()}
        # Every way checkpoints name them: llm-compressor's self_attn.k_scale / v_scale, ModelOpt's
        # on k_proj and v_proj, and AutoFP8's one kv_scale for both. Layer 0's is V's, 20 times
        # smaller than K's largest values, which saturate: a server that stored K at another scale,
        # or gave a rank another head's, or V K's, would miss the reference by as much as one
        # that stored everything at scale 1 (the bar: a fifth of that).
        k_scales[0] = v_scales[0]
        tensors = hf_tensors(self.gguf)
        for layer in range(c.layers):
            prefix = "model.layers.%d.self_attn." % layer
            if layer == 0:
                tensors[prefix + "kv_scale"] = v_scales[0].reshape(())
            elif layer % 2:
                tensors[prefix + "k_scale"] = k_scales[layer]
                tensors[prefix + "v_scale"] = v_scales[layer].reshape(())
            else:
                tensors[prefix + "k_proj.k_scale"] = k_scales[layer]
                tensors[prefix + "v_proj.v_scale"] = v_scales[layer].reshape([1])
        folder = os.path.join(self.tmp.name, "SmolLM2-kv-scales")
        write_folder(self.gguf, tensors, folder, shards=2)

        def cached(k_scale, v_scale):
            return reference_logits(self.gguf, self.tokens, inv_freq,
                                    kv_cache=fp8_kv_cache(k_scale, v_scale))

        def rms(a, b):
            return float(np.sqrt(np.mean((a - b) ** 2)))

        want = cached(lambda layer: k_scales[layer], lambda layer: v_scales[layer])
        at_one = cached(lambda layer: 1.0, lambda layer: 1.0)
        for tp in (1, 3):  # at tp 3 each rank holds one KV head and its scale
            got, _, _ = self.serve(folder, tp, ["--kv-cache-dtype", "fp8"])
            top1 = np.mean(got.argmax(axis=1) == want.argmax(axis=1))
            print("checkpoint KV scales, FP8 KV, tp=%d: RMS logit difference %.4f from the NumPy "
                  "cache at those scales (max %.3f, top-1 %.0f%%), %.4f from it at scale 1 (which "
                  "is %.4f from the first)" % (tp, rms(got, want), np.abs(got - want).max(),
                                                100 * top1, rms(got, at_one), rms(want, at_one)),
                  flush=True)
            self.assertLess(rms(got, want), rms(want, at_one) / 5, tp)
            self.assertGreaterEqual(top1, 0.95, tp)

        # Layer 0's calibrated kv_scale covering K and V, for the cases below.
        both = np.array(max(amax[0][0].max(), amax[0][1]) / 448, dtype=np.float32)
        tensors["model.layers.0.self_attn.kv_scale"] = both

        # A KV scale where no checkpoint format tpserve knows puts one is read past, as before.
        elsewhere = os.path.join(self.tmp.name, "kv-scale-elsewhere")
        write_folder(self.gguf, dict(tensors, **{
            "model.layers.1.self_attn.attn.k_scale": np.array(0.1, np.float32)}), elsewhere)
        result = subprocess.run(
            [os.path.join(self.args.bin_dir, "tpserve-generate"), "--model", elsewhere,
             "--prompt", "hi", "--max-tokens", "1"], capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])

        # Scales tpserve cannot use are refused naming the tensor.
        for case, extra, want_error in [
                ("twice", {"model.layers.1.self_attn.kv_scale": np.array(0.1, np.float32)},
                 "model.layers.1.self_attn.kv_scale scales the KV cache of a layer"),
                ("count", {"model.layers.1.self_attn.k_scale": np.ones(2, np.float32)},
                 "tensor model.layers.1.self_attn.k_scale holds 2 scales: one for the layer or "
                 "one per KV head (3) is read"),
                ("zero", {"model.layers.2.self_attn.k_proj.k_scale": np.zeros(3, np.float32)},
                 "tensor blk.2.k_cache_scale holds the scale 0")]:
            broken = os.path.join(self.tmp.name, "kv-scales-" + case)
            write_folder(self.gguf, dict(tensors, **extra), broken)
            self.assertIn(want_error, self.generate_error(broken), case)

    def complete(self, cluster, prompt, **fields):
        body = json.dumps(dict({"prompt": prompt, "max_tokens": 8}, **fields))
        request = urllib.request.Request(cluster.http_url + "/v1/completions", body.encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            choice = json.load(response)["choices"][0]
        return choice["text"], choice["finish_reason"]

    def generate_ids(self, cluster, prompt, sampling):
        import grpc

        pb = self.protos.inference_pb2
        with grpc.insecure_channel(cluster.grpc_address) as channel:
            stub = self.protos.inference_pb2_grpc.InferenceServiceStub(channel)
            chunks = stub.Generate(pb.GenerateRequest(text=prompt, max_tokens=8,
                                                      sampling=sampling), timeout=120)
            return [i for chunk in chunks for i in chunk.token_ids]

    def test_generation_config_sets_sampling_and_eos_ids(self):
        """generation_config.json's sampling applies to requests that leave it out (top_k 1: the
        greedy answer whatever the seed), on HTTP and gRPC; --sampling-defaults builtin ignores
        it; every id of its eos_token_id list ends generation."""
        pb = self.protos.inference_pb2
        folder = os.path.join(self.tmp.name, "generation")
        shutil.copytree(self.folder, folder)
        config_path = os.path.join(folder, "generation_config.json")
        with open(config_path, "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": True,
                       "temperature": 0.9, "top_k": 1, "top_p": 0.95}, f)
        prompt, stop_prompt = "Once upon a time", "The capital of France is"
        seeds = [11, 12, 13]
        with tpserve_cluster.Cluster(self.args.bin_dir, folder) as cluster:
            greedy = self.complete(cluster, prompt, temperature=0)
            for seed in seeds:
                self.assertEqual(self.complete(cluster, prompt, seed=seed), greedy, seed)
            # A field the request sets wins over the model's.
            self.assertNotEqual({self.complete(cluster, prompt, seed=s, top_k=0)[0] for s in seeds},
                                {greedy[0]})
            greedy_ids = self.generate_ids(cluster, prompt, pb.Sampling(temperature=0))
            self.assertEqual(self.generate_ids(cluster, prompt, pb.Sampling(seed=5)), greedy_ids)
            stop_id = self.generate_ids(cluster, stop_prompt, pb.Sampling(temperature=0))[0]
            self.assertIn("take the model's sampling: temperature 0.9, top_k 1, top_p 0.95",
                          cluster.log_tail(200))

        with open(config_path, "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": [2, stop_id], "top_k": 1}, f)
        with tpserve_cluster.Cluster(self.args.bin_dir, folder,
                                     extra_args=["--sampling-defaults", "builtin"]) as cluster:
            self.assertNotEqual({self.complete(cluster, prompt, seed=s)[0] for s in seeds},
                                {greedy[0]})
            self.assertEqual(self.complete(cluster, stop_prompt, temperature=0), ("", "stop"))
            self.assertNotIn("take the model's sampling", cluster.log_tail(200))

        with open(config_path, "w") as f:
            json.dump({"top_p": 0}, f)
        with self.assertRaises(RuntimeError) as refused:
            with tpserve_cluster.Cluster(self.args.bin_dir, folder, ready_timeout=60):
                pass
        self.assertIn("general.sampling.top_p: top_p = 0 is outside (0, 1]", str(refused.exception))

    def generate_error(self, folder):
        """What tpserve-generate says when it cannot serve `folder`."""
        result = subprocess.run(
            [os.path.join(self.args.bin_dir, "tpserve-generate"), "--model", folder,
             "--prompt", "hi", "--max-tokens", "1"],
            capture_output=True, text=True, timeout=120)
        self.assertNotEqual(result.returncode, 0, result.stdout)
        return result.stderr + result.stdout

    def broken_copy(self, name):
        copy = os.path.join(self.tmp.name, name)
        shutil.copytree(self.sharded, copy)
        return copy

    def test_broken_folders_name_the_file_and_tensor(self):
        index_path = "model.safetensors.index.json"
        shard = "model-00002-of-00002.safetensors"

        missing = self.broken_copy("missing-shard")
        os.unlink(os.path.join(missing, shard))
        self.assertIn("weight file %s cannot be opened" % shard, self.generate_error(missing))

        truncated = self.broken_copy("truncated")
        path = os.path.join(truncated, shard)
        os.truncate(path, os.path.getsize(path) - 1000)
        message = self.generate_error(truncated)
        self.assertIn(shard, message)
        self.assertIn("the file is truncated or corrupt", message)

        outside = self.broken_copy("outside")
        with open(os.path.join(outside, index_path)) as f:
            index = json.load(f)
        index["weight_map"]["model.norm.weight"] = "../../etc/passwd"
        with open(os.path.join(outside, index_path), "w") as f:
            json.dump(index, f)
        message = self.generate_error(outside)
        self.assertIn("model.norm.weight", message)
        self.assertIn("not a file name inside the folder", message)
        self.assertNotIn("root:", message)

        from safetensors.numpy import save_file

        for case, tensor, values, want in [
            ("dtype", "model.norm.weight", np.zeros(576, np.int32), "has dtype I32"),
            ("shape", "model.layers.4.mlp.up_proj.weight", np.zeros((1535, 576), np.float32),
             "shape [1535, 576] disagrees with config.json ([1536, 576])"),
        ]:
            folder = self.broken_copy("bad-" + case)
            with open(os.path.join(folder, index_path)) as f:
                file = json.load(f)["weight_map"][tensor]
            from safetensors.numpy import load_file

            contents = load_file(os.path.join(folder, file))
            contents[tensor] = values
            save_file(contents, os.path.join(folder, file))
            message = self.generate_error(folder)
            self.assertIn(file, message, case)
            self.assertIn(tensor, message, case)
            self.assertIn(want, message, case)

        for case, change, want in [
            ("architecture", {"architectures": ["GPTNeoXForCausalLM"]},
             "config.json: architectures [\"GPTNeoXForCausalLM\"] is not supported"),
            ("head-dim", {"head_dim": -4}, "config.json: head_dim -4 is not even in [2, 65536]"),
            ("untied", {"tie_word_embeddings": False},
             "config.json says tie_word_embeddings false, but lm_head.weight is in no weight file"),
        ]:
            folder = self.broken_copy("config-" + case)
            with open(os.path.join(folder, "config.json")) as f:
                content = json.load(f)
            content.update(change)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(content, f)
            self.assertIn(want, self.generate_error(folder), case)

        # Nested 100,000 deep: refused before anything copies or prints it (both recurse).
        deep = self.broken_copy("deep")
        with open(os.path.join(deep, "config.json"), "w") as f:
            f.write('{"architectures": ' + "[" * 100000 + "]" * 100000 + "}")
        self.assertIn("config.json: nests deeper than 64", self.generate_error(deep))


if __name__ == "__main__":
    tpserve_cluster.run_tests()

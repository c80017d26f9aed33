"""lora: LoRA adapters (--lora-modules) against the published formula, on real clusters.

tpserve-mkmodel writes a random-weight Llama (6 heads, 3 KV heads, fp32); NumPy writes three
PEFT adapters as PEFT saves them (adapter_config.json, adapter_model.safetensors): rank 4 on all
seven projections (F32), rank 8 on q and v (F16), rank 16 on o, gate, up and down with rsLoRA's
scale. The reference (hf_reference.py, Hugging Face's Llama formulas in float64) runs the base
model with each adapter merged: W + scale · B · A in Hugging Face's row order, which the GGUF
file's permuted q/k rows must match.

- At tp 1 and tp 3, gRPC Score under each adapter gives the reference's logits within 1e-3, and
  each adapter moves them far beyond that (the test would see an adapter left out).
- A batch mixing the three adapters and the base model (four concurrent greedy Generates) gives
  each request the tokens it gets alone; an adapter after the base model on the same prompt does
  not reuse the base model's cached prefix (each greedy token is the reference's argmax).
- Load and unload under load (tpctl lora and the admin API): while clients stream greedy
  requests on the base model and an adapter, another adapter is loaded (then serves the
  reference's tokens) and the first unloaded: every request either completes with the tokens it
  gets alone or, once the unload began, is refused NOT_FOUND at once; none fails midway.
- /v1/models and ListModels list the adapters with their parent; an unknown name is NOT_FOUND
  over gRPC and 404 over HTTP. (worker_server's InitRefusesAModelItWasNotStartedWith checks that
  a worker refuses an adapter path it was not started with; the launcher passes --lora-path.)

    lora_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import os
import subprocess
import threading
import unittest
import urllib.error
import urllib.request

import numpy as np

import tpserve_cluster
from gguf_reader import Gguf
from hf_reference import HfConfig, default_inv_freq, reference_logits

TOLERANCE = 1e-3
SHAPE = ["--layers", "2", "--hidden", "96", "--heads", "6", "--kv-heads", "3", "--ffn", "192",
         "--vocab", "320", "--context", "512", "--seed", "11"]
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTERS = {  # name: (rank, alpha, targets, dtype, rslora)
    "all4": (4, 8, MODULES, np.float32, False),
    "qv8": (8, 16, ["q_proj", "v_proj"], np.float16, False),
    "mlp16": (16, 4, ["o_proj", "gate_proj", "up_proj", "down_proj"], np.float32, True),
}
PROMPT = [int(t) for t in np.random.default_rng(3).integers(3, 320, 24)]


def module_shape(config, module):
    """[out, in] of a projection."""
    q, kv, ffn = config.heads * config.head_dim, config.kv_heads * config.head_dim, 192
    return {"q_proj": (q, config.hidden), "k_proj": (kv, config.hidden),
            "v_proj": (kv, config.hidden), "o_proj": (config.hidden, q),
            "gate_proj": (ffn, config.hidden), "up_proj": (ffn, config.hidden),
            "down_proj": (config.hidden, ffn)}[module]


def write_adapter(folder, config, rank, alpha, targets, dtype, rslora, seed):
    """A PEFT adapter folder; returns its deltas {(layer, module): scale · B · A} in float64."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    tensors, deltas = {}, {}
    scale = alpha / (np.sqrt(rank) if rslora else rank)
    for layer in range(config.layers):
        for module in targets:
            out, inp = module_shape(config, module)
            a = (rng.standard_normal((rank, inp)) * 0.2).astype(dtype)
            b = (rng.standard_normal((out, rank)) * 0.2).astype(dtype)
            part = "self_attn" if module.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            name = "base_model.model.model.layers.%d.%s.%s.lora_%s.weight"
            tensors[name % (layer, part, module, "A")] = a
            tensors[name % (layer, part, module, "B")] = b
            deltas[(layer, module)] = scale * (b.astype(np.float64) @ a.astype(np.float64))
    save_file(tensors, os.path.join(folder, "adapter_model.safetensors"))
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": targets,
                   "use_rslora": rslora, "bias": "none", "use_dora": False,
                   "fan_in_fan_out": False, "base_model_name_or_path": "random-llama"}, f)
    return deltas


class Lora(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tpserve_cluster.set_up_scratch(cls, "tpserve-lora-")
        cls.model = os.path.join(cls.tmp.name, "base.gguf")
        subprocess.run([os.path.join(cls.args.bin_dir, "tpserve-mkmodel"), "--output", cls.model]
                       + SHAPE, check=True, capture_output=True, timeout=60)
        cls.gguf = Gguf(cls.model)
        cls.config = HfConfig(cls.gguf)
        cls.inv_freq = default_inv_freq(cls.config.theta, cls.config.head_dim)
        cls.deltas, cls.modules = {}, []
        for seed, (name, spec) in enumerate(ADAPTERS.items()):
            folder = os.path.join(cls.tmp.name, name)
            cls.deltas[name] = write_adapter(folder, cls.config, *spec, seed=seed)
            cls.modules += ["--lora-modules", "%s=%s" % (name, folder)]

    def cluster(self, tp):
        return tpserve_cluster.Cluster(self.args.bin_dir, self.model, tp=tp,
                                       extra_args=self.modules)

    def reference(self, tokens, name):
        return reference_logits(self.gguf, tokens, self.inv_freq, deltas=self.deltas.get(name))

    def test_logits_equal_the_merged_reference_at_tp_1_and_3(self):
        base = self.reference(PROMPT, "")
        for tp in (1, 3):
            with self.cluster(tp) as cluster:
                for name in [""] + list(ADAPTERS):
                    got = tpserve_cluster.score_logits(self.protos, cluster, PROMPT, model=name)
                    want = self.reference(PROMPT, name)
                    diff = np.abs(got - want).max()
                    moved = np.abs(want - base).max()
                    print("tp %d %-6s max |logit difference| %.2e (the adapter moves them %.2f)"
                          % (tp, name or "base", diff, moved), flush=True)
                    self.assertLess(diff, TOLERANCE, (tp, name))
                    if name:
                        self.assertGreater(moved, 50 * TOLERANCE, name)

    def generate(self, stub, name, tokens=PROMPT, max_tokens=16):
        pb = self.protos.inference_pb2
        request = pb.GenerateRequest(token_ids=pb.TokenIds(ids=tokens), max_tokens=max_tokens,
                                     ignore_eos=True, model=name,
                                     sampling=pb.Sampling(temperature=0))
        out = []
        for chunk in stub.Generate(request, timeout=300):
            out += chunk.token_ids
        return out

    def assert_greedy_under(self, name, tokens):
        """Each generated token is the reference's argmax (or within a rounding of it)."""
        logits = self.reference(PROMPT + tokens, name)
        for i, token in enumerate(tokens):
            row = logits[len(PROMPT) - 1 + i]
            self.assertGreater(row[token], row.max() - TOLERANCE, (name, i))

    def test_a_mixed_batch_gives_each_request_its_own_output(self):
        import grpc

        names = [""] + list(ADAPTERS)
        with self.cluster(3) as cluster:
            with grpc.insecure_channel(cluster.grpc_address) as channel:
                stub = self.protos.inference_pb2_grpc.InferenceServiceStub(channel)
                # The base model first: its prompt blocks are cached, and must not serve the
                # adapters, whose K/V differ.
                alone = {name: self.generate(stub, name) for name in names}
                together = {}
                threads = [threading.Thread(
                    target=lambda n=name: together.__setitem__(n, self.generate(stub, n)))
                    for name in names]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                models = stub.ListModels(self.protos.inference_pb2.ListModelsRequest(), timeout=30)
                with self.assertRaises(grpc.RpcError) as unknown:
                    self.generate(stub, "nope")
                self.assertEqual(unknown.exception.code(), grpc.StatusCode.NOT_FOUND)
            with urllib.request.urlopen(cluster.http_url + "/v1/models", timeout=30) as reply:
                listed = json.load(reply)["data"]
            with self.assertRaises(urllib.error.HTTPError) as missing:
                tpserve_cluster.post_json(cluster, "/v1/completions",
                                          {"model": "nope", "prompt": [5, 6], "max_tokens": 2})
            self.assertEqual(missing.exception.code, 404)
        for name in names:
            print("%-6s %s" % (name or "base", alone[name]), flush=True)
            self.assertEqual(together[name], alone[name], name)
            self.assert_greedy_under(name, alone[name])
        self.assertEqual(len({tuple(v) for v in alone.values()}), len(names),
                         "every adapter changes the greedy output")
        self.assertEqual([m.id for m in models.models][1:], list(ADAPTERS))
        self.assertEqual({m.parent for m in models.models[1:]}, {models.models[0].id})
        self.assertEqual([m["id"] for m in listed][1:], list(ADAPTERS))
        self.assertEqual(listed[1]["parent"], listed[0]["id"])


    def test_load_and_unload_under_load_lose_no_request(self):
        import grpc

        pb = self.protos.inference_pb2
        admin_pb = self.protos.admin_pb2
        folder = os.path.join(self.tmp.name, "qv8")
        with tpserve_cluster.Cluster(self.args.bin_dir, self.model, tp=1, extra_args=[
                "--lora-modules", "all4=" + os.path.join(self.tmp.name, "all4"),
                "--max-loras", "2", "--lora-dir", self.tmp.name]) as cluster:
            with grpc.insecure_channel(cluster.grpc_address) as channel, \
                    grpc.insecure_channel(cluster.admin_address) as admin_channel:
                stub = self.protos.inference_pb2_grpc.InferenceServiceStub(channel)
                admin = self.protos.admin_pb2_grpc.AdminServiceStub(admin_channel)
                alone = {name: self.generate(stub, name, max_tokens=24) for name in ("", "all4")}
                outcomes, stop = [], threading.Event()

                def client(name):
                    while not stop.is_set():
                        try:
                            outcomes.append((name, self.generate(stub, name, max_tokens=24)))
                        except grpc.RpcError as error:
                            outcomes.append((name, error.code()))

                threads = [threading.Thread(target=client, args=(name,))
                           for name in ("", "all4", "", "all4")]
                for thread in threads:
                    thread.start()
                loaded = admin.LoadLoraAdapter(
                    admin_pb.LoadLoraAdapterRequest(name="qv8", path=folder), timeout=120)
                self.assertEqual(loaded.adapter.slot, 2)
                self.assert_greedy_under("qv8", self.generate(stub, "qv8", max_tokens=12))
                admin.UnloadLoraAdapter(admin_pb.UnloadLoraAdapterRequest(name="all4"),
                                        timeout=120)
                stop.set()
                for thread in threads:
                    thread.join()
                listed = subprocess.run(
                    [os.path.join(self.args.bin_dir, "tpctl"), "--coordinator",
                     cluster.admin_address, "lora", "list"],
                    check=True, capture_output=True, text=True, timeout=60).stdout
                with self.assertRaises(grpc.RpcError) as gone:
                    self.generate(stub, "all4")
                self.assertEqual(gone.exception.code(), grpc.StatusCode.NOT_FOUND)
                # all4's slot goes to the next adapter, which must not match all4's cached
                # prefixes of the same prompt.
                reused = admin.LoadLoraAdapter(admin_pb.LoadLoraAdapterRequest(
                    name="mlp16", path=os.path.join(self.tmp.name, "mlp16")), timeout=120)
                self.assertEqual(reused.adapter.slot, 1)
                self.assert_greedy_under("mlp16", self.generate(stub, "mlp16", max_tokens=12))
        print(listed, flush=True)
        self.assertIn("qv8", listed)
        self.assertIn("slot 2", listed)
        self.assertNotIn("all4", listed)
        done = {name: sum(1 for n, o in outcomes if n == name and isinstance(o, list))
                for name in ("", "all4")}
        print("completed under load: %d base, %d all4; %d refused" % (
            done[""], done["all4"], sum(1 for _, o in outcomes if not isinstance(o, list))))
        self.assertGreater(done[""], 0)
        self.assertGreater(done["all4"], 0)
        for name, outcome in outcomes:
            if isinstance(outcome, list):
                self.assertEqual(outcome, alone[name], name)
            else:
                self.assertEqual((name, outcome), ("all4", grpc.StatusCode.NOT_FOUND))


if __name__ == "__main__":
    tpserve_cluster.run_tests()

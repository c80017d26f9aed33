"""tpctl plan end to end: from a Hugging Face folder's config.json (Llama-3-70B's shape, the
figures of tests/unit/cli/capacity_plan_test.cc, worked out by hand) and from the bundled GGUF,
whose parameter count must equal the sum of its tensors' sizes as an independent GGUF reader
(gguf_reader.py) finds them. Bad input is an error naming the flag, exit status 1.

    tpctl_plan_test.py --bin-dir BUILD/bin --model MODEL.gguf
"""

import json
import os
import subprocess
import tempfile
import unittest

import gguf_reader
import tpserve_cluster

LLAMA3_70B = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 80,
              "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False}


def plan(*args):
    tpctl = os.path.join(tpserve_cluster.parsed_args().bin_dir, "tpctl")
    return subprocess.run([tpctl, "plan", *args], capture_output=True, text=True, timeout=60)


class TpctlPlan(unittest.TestCase):
    def test_config_json(self):
        with tempfile.TemporaryDirectory(prefix="tpserve-plan-") as folder:
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(LLAMA3_70B, f)
            done = plan("--model", folder, "--gpu", "h200", "--gpu-memory-gib", "140", "--tp",
                        "8", "--context", "8192", "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        out = json.loads(done.stdout)
        self.assertEqual(out["params"], 70_553_706_496)
        self.assertEqual(out["rank_weight_bytes"], 19_479_412_736)
        self.assertEqual(out["kv_blocks"], 175_076)
        self.assertEqual(out["sequences"], 341)
        self.assertAlmostEqual(out["itl_ms"], 3.6903 + 1.6102, places=3)

    def test_gguf_counts_every_tensor(self):
        model = tpserve_cluster.parsed_args().model
        done = plan("--model", model, "--json")
        self.assertEqual(done.returncode, 0, done.stderr)
        tensors = gguf_reader.Gguf(model).tensors
        self.assertEqual(json.loads(done.stdout)["params"],
                         sum(t.size for t in tensors.values()))
        text = plan("--model", model, "--tp", "3")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("plan: TP 3 on 1 node(s)", text.stdout)

    def test_bad_input_names_the_flag(self):
        model = tpserve_cluster.parsed_args().model
        done = plan("--model", model, "--tp", "2")  # 9 heads
        self.assertEqual(done.returncode, 1)
        self.assertIn("--tp", done.stderr)
        missing = plan("--model", "/nonexistent/config.json")
        self.assertEqual(missing.returncode, 1)
        self.assertIn("--model", missing.stderr)


if __name__ == "__main__":
    tpserve_cluster.run_tests()

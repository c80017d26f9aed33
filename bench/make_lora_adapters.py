"""Random PEFT LoRA adapters for a GGUF model's shape, as PEFT saves them (adapter_config.json,
adapter_model.safetensors), for benchmarks: every projection of every layer, rank R, F16.

    bench/make_lora_adapters.py MODEL.gguf OUT_DIR [--count 4] [--rank 16]

Writes OUT_DIR/lora1 ... OUT_DIR/loraN and prints their --lora-modules arguments."""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from gguf_reader import Gguf  # noqa: E402


def main():
    from safetensors.numpy import save_file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out_dir")
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    m = Gguf(args.model).metadata
    arch = m["general.architecture"]
    hidden = m[arch + ".embedding_length"]
    heads = m[arch + ".attention.head_count"]
    kv = m[arch + ".attention.head_count_kv"] * (hidden // heads)
    ffn = m[arch + ".feed_forward_length"]
    shapes = {"q_proj": (hidden, hidden), "k_proj": (kv, hidden), "v_proj": (kv, hidden),
              "o_proj": (hidden, hidden), "gate_proj": (ffn, hidden), "up_proj": (ffn, hidden),
              "down_proj": (hidden, ffn)}
    specs = []
    for n in range(1, args.count + 1):
        rng = np.random.default_rng(n)
        folder = os.path.join(args.out_dir, "lora%d" % n)
        os.makedirs(folder, exist_ok=True)
        tensors = {}
        for layer in range(m[arch + ".block_count"]):
            for module, (out, inp) in shapes.items():
                part = "mlp" if module in ("gate_proj", "up_proj", "down_proj") else "self_attn"
                name = "base_model.model.model.layers.%d.%s.%s.lora_%%s.weight" % (layer, part,
                                                                                     module)
                tensors[name % "A"] = (rng.standard_normal((args.rank, inp)) * 0.01).astype(
                    np.float16)
                tensors[name % "B"] = (rng.standard_normal((out, args.rank)) * 0.01).astype(
                    np.float16)
        save_file(tensors, os.path.join(folder, "adapter_model.safetensors"))
        with open(os.path.join(folder, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "r": args.rank, "lora_alpha": 2 * args.rank,
                       "target_modules": list(shapes), "bias": "none"}, f)
        specs.append("lora%d=%s" % (n, folder))
    print(" ".join(specs))


if __name__ == "__main__":
    main()

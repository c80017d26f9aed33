#!/usr/bin/env python3
"""Streams a completion from tpserve's gRPC InferenceService and prints the text as it arrives.

The Python stubs are generated from proto/ with grpc_tools.protoc when the script starts, into
a temporary directory or --stubs-dir. Needs `pip install grpcio grpcio-tools`
(scripts/requirements-test.txt pins both).

    examples/grpc_client.py --address 127.0.0.1:50051 --chatml "What is the capital of France?"
    examples/grpc_client.py --address 127.0.0.1:50051 --n 2 --temperature 0.8 --seed 1 \\
        --stop . "The best thing about Paris is"
"""

import argparse
import importlib
import os
import sys
import tempfile

import grpc

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")


def load_stubs(out_dir, proto_dir):
    from grpc_tools import protoc

    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    if protoc.main(["grpc_tools.protoc", "-I" + proto_dir, "-I" + well_known,
                    "--python_out=" + out_dir, "--grpc_python_out=" + out_dir,
                    "tpserve/v1/inference.proto"]) != 0:
        sys.exit(f"grpc_client: grpc_tools.protoc failed on {proto_dir}/tpserve/v1/inference.proto")
    sys.path.insert(0, out_dir)
    return (importlib.import_module("tpserve.v1.inference_pb2"),
            importlib.import_module("tpserve.v1.inference_pb2_grpc"))


def chatml(prompt):
    """One user turn in ChatML, the chat template of the bundled SmolLM2 model."""
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def generate(args, pb, pb_grpc):
    sampling = pb.Sampling(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    if args.seed is not None:
        sampling.seed = args.seed
    request = pb.GenerateRequest(text=chatml(args.prompt) if args.chatml else args.prompt,
                                 max_tokens=args.max_tokens, sampling=sampling, n=args.n,
                                 stop=args.stop)
    texts = {}
    with grpc.insecure_channel(args.address) as channel:
        stub = pb_grpc.InferenceServiceStub(channel)
        for chunk in stub.Generate(request, timeout=args.timeout):
            if args.n == 1:
                print(chunk.text, end="", flush=True)
            texts[chunk.index] = texts.get(chunk.index, "") + chunk.text
            if chunk.finish_reason:
                print() if args.n == 1 else print(f"[{chunk.index}] {texts[chunk.index]}")
                u = chunk.usage
                print(f"[{chunk.index}] finish_reason={chunk.finish_reason} "
                      f"prompt_tokens={u.prompt_tokens} completion_tokens={u.completion_tokens} "
                      f"cached_prompt_tokens={u.cached_prompt_tokens}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt", nargs="?", default="What is the capital of France?")
    parser.add_argument("--address", default="127.0.0.1:50051",
                        help="the coordinator's gRPC HOST:PORT")
    parser.add_argument("--chatml", action="store_true",
                        help="send the prompt as a ChatML user turn (the bundled model's template)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0 = disabled")
    parser.add_argument("--seed", type=int, help="sample i of n uses seed + i; default: random")
    parser.add_argument("--n", type=int, default=1, help="independent samples")
    parser.add_argument("--stop", action="append", default=[],
                        help="stop string (repeatable); it is not returned")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for the whole call")
    parser.add_argument("--proto-dir", default=PROTO_DIR, help="root of tpserve/v1/*.proto")
    parser.add_argument("--stubs-dir", help="where to write the generated stubs (default: a "
                                            "temporary directory)")
    args = parser.parse_args()

    try:
        if args.stubs_dir:
            os.makedirs(args.stubs_dir, exist_ok=True)
            generate(args, *load_stubs(args.stubs_dir, args.proto_dir))
        else:
            with tempfile.TemporaryDirectory(prefix="tpserve-stubs-") as stubs_dir:
                generate(args, *load_stubs(stubs_dir, args.proto_dir))
    except grpc.RpcError as e:
        sys.exit(f"grpc_client: Generate on {args.address} failed: {e.code().name}: {e.details()}")


if __name__ == "__main__":
    main()

"""Python stubs of tpserve's public and admin APIs, generated from proto/ at run time.

    protos = load(out_dir)
    stub = protos.inference_pb2_grpc.InferenceServiceStub(channel)
    stub.Generate(protos.inference_pb2.GenerateRequest(text="Hi", max_tokens=8))

Generating with grpc_tools.protoc keeps the stubs in step with the protos the binaries were
built from, and nothing generated is committed.
"""

import importlib
import os
import sys
import types

PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")
_FILES = ("tpserve/v1/inference.proto", "tpserve/v1/admin.proto", "tpserve/v1/worker.proto")


def load(out_dir):
    """Generates the stubs into `out_dir` and imports them; `out_dir` joins sys.path."""
    from grpc_tools import protoc

    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = ["grpc_tools.protoc", "-I" + os.path.abspath(PROTO_ROOT), "-I" + well_known,
            "--python_out=" + out_dir, "--grpc_python_out=" + out_dir, *_FILES]
    if protoc.main(args) != 0:
        raise RuntimeError("grpc_tools.protoc failed on " + ", ".join(_FILES))
    sys.path.insert(0, out_dir)
    names = ("inference_pb2", "inference_pb2_grpc", "admin_pb2", "admin_pb2_grpc", "worker_pb2",
             "worker_pb2_grpc")
    return types.SimpleNamespace(
        **{name: importlib.import_module("tpserve.v1." + name) for name in names})

"""A local tpserve cluster for the Python integration tests.

Starts the `tpserve` launcher (coordinator and workers as child processes on 127.0.0.1, ports
chosen at run time, every process's log in one file with -v) and reads the addresses it prints
once the coordinator listens, then waits for the line it prints once the cluster serves:

    tpserve: gRPC at HOST:PORT; HTTP at HOST:PORT; admin at HOST:PORT
    tpserve: loaded MODEL on T cpu workers: SIZE (100%) in S s; serving

Use as a context manager; the whole process group is stopped on exit, whatever happened. Test
files run by ctest end in `run_tests()` and start their cluster with `start_class_cluster`.
"""

import argparse
import ctypes
import os
import re
import signal
import subprocess
import tempfile
import sys
import time
import unittest

_ADDRESSES = re.compile(r"^tpserve: gRPC at (\S+); HTTP at (\S+); admin at ([^\s;]+)", re.M)
_SERVING = re.compile(r"^tpserve: loaded .*; serving$", re.M)
_PR_SET_PDEATHSIG = 1


def die_with_parent():
    """preexec_fn of a test's child process: it gets SIGTERM when the test dies, e.g. at a ctest
    timeout (the launcher then stops its coordinator and workers, which in turn die with it)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Cluster:
    def __init__(self, bin_dir, model, tp=1, extra_args=(), ready_timeout=180):
        self.bin_dir = bin_dir
        self.model = model
        self.tp = tp
        self.extra_args = list(extra_args)
        self.ready_timeout = ready_timeout
        self.grpc_address = None
        self.http_address = None
        self.admin_address = None
        self.process = None
        self.log_path = None

    @property
    def http_url(self):
        return "http://" + self.http_address

    def __enter__(self):
        log = tempfile.NamedTemporaryFile(prefix="tpserve-pytest-", suffix=".log", delete=False)
        self.log_path = log.name
        args = [os.path.join(self.bin_dir, "tpserve"), "--model", self.model, "--tp", str(self.tp),
                "--port", "0", "--http-port", "0", "-v"] + self.extra_args
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            match = _ADDRESSES.search(text)
            if match and _SERVING.search(text):
                self.grpc_address, self.http_address, self.admin_address = match.groups()
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("tpserve did not start serving:\n" + self.log_tail())

    def __exit__(self, exc_type, exc, traceback):
        self.stop()
        if exc_type is None:
            os.unlink(self.log_path)  # kept when the test failed, for its tail
        return False

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def log_tail(self, lines=40):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])


_TEST_ARGS = None


def run_tests(add_arguments=None):
    """The main() of a test file: --bin-dir and --model as ctest passes them, and what
    add_arguments(parser) adds, then unittest's. parsed_args() returns them."""
    global _TEST_ARGS
    doc = sys.modules["__main__"].__doc__ or ""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0] if doc else None)
    parser.add_argument("--bin-dir", required=True, help="directory holding tpserve")
    parser.add_argument("--model", required=True, help="GGUF model file")
    if add_arguments is not None:
        add_arguments(parser)
    _TEST_ARGS, rest = parser.parse_known_args()
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)


def parsed_args():
    """The arguments run_tests() parsed."""
    return _TEST_ARGS


def set_up_scratch(test_class, prefix):
    """For setUpClass: test_class.args (run_tests' arguments), test_class.tmp (a temporary
    directory, removed after the class's tests) and test_class.protos (the gRPC stubs generated
    into it, see tpserve_protos)."""
    import tpserve_protos

    test_class.args = parsed_args()
    test_class.tmp = tempfile.TemporaryDirectory(prefix=prefix)
    test_class.addClassCleanup(test_class.tmp.cleanup)
    test_class.protos = tpserve_protos.load(test_class.tmp.name)


def make_draft_model(test_class):
    """A draft for --speculative draft in test_class.tmp (set_up_scratch): the model's matrices
    written at Q4_0 by tpserve-quantize, so that it shares the tokenizer and mostly, not always,
    proposes what the model picks. Returns the launcher flags that use it."""
    path = os.path.join(test_class.tmp.name, "draft.q4_0.gguf")
    subprocess.run([os.path.join(test_class.args.bin_dir, "tpserve-quantize"),
                    test_class.args.model, path, "--type", "q4_0"], check=True,
                   stderr=subprocess.DEVNULL)
    return ["--speculative", "draft", "--draft-model", path]


def start_class_cluster(test_class, tp, extra_args=()):
    """A serving cluster for a TestCase class (call in setUpClass); stopped after its tests."""
    cluster = Cluster(_TEST_ARGS.bin_dir, _TEST_ARGS.model, tp=tp, extra_args=extra_args)
    cluster.__enter__()
    test_class.addClassCleanup(cluster.stop)
    return cluster


def start_class_grpc(test_class, tp):
    """For setUpClass of a gRPC test: stubs generated from proto/ (see tpserve_protos), a serving
    cluster and ready channels to its client port and its admin port, all released after the
    class's tests."""
    import grpc
    import tpserve_protos

    stubs_dir = tempfile.TemporaryDirectory(prefix="tpserve-stubs-")
    test_class.addClassCleanup(stubs_dir.cleanup)
    protos = tpserve_protos.load(stubs_dir.name)
    cluster = start_class_cluster(test_class, tp=tp)
    channel = grpc.insecure_channel(cluster.grpc_address)
    test_class.addClassCleanup(channel.close)
    grpc.channel_ready_future(channel).result(timeout=10)
    admin_channel = grpc.insecure_channel(cluster.admin_address)
    test_class.addClassCleanup(admin_channel.close)
    grpc.channel_ready_future(admin_channel).result(timeout=10)
    return protos, cluster, channel, admin_channel


def coordinator_pid(launcher_pid):
    """The tpserve-coordinator child of the launcher."""
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        children = [int(p) for p in f.read().split()]
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"tpserve-coordinator" in f.read().split(b"\0")[0]:
                return pid
    raise AssertionError(f"no tpserve-coordinator among the launcher's children {children}")


def rss_kib(pid):
    """A process's resident memory."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def post_json(cluster, path, body, timeout=300):
    """The JSON answer of a POST of `body` to the cluster's HTTP `path`."""
    import json
    import urllib.request

    request = urllib.request.Request(cluster.http_url + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.load(reply)


def metric_totals(cluster, pattern):
    """{name: value} of the cluster's `tpserve:<name>_total` counters whose name matches the
    regular expression `pattern`."""
    import urllib.request

    with urllib.request.urlopen(cluster.http_url + "/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {name: int(value) for name, value in
            re.findall(r"^tpserve:(%s)_total\{[^}]*\} (\d+)$" % pattern, text, re.M)}


def score_logits(protos, cluster, tokens, model=""):
    """[len(tokens), vocab] float64: the logits the cluster's gRPC Score gives each token, under
    `model` (a LoRA adapter's name; empty: the base model)."""
    import grpc
    import numpy as np

    pb = protos.inference_pb2
    # A logits row per token is past gRPC's 4 MiB default for a few dozen tokens.
    options = [("grpc.max_receive_message_length", 256 << 20)]
    with grpc.insecure_channel(cluster.grpc_address, options=options) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        stub = protos.inference_pb2_grpc.InferenceServiceStub(channel)
        reply = stub.Score(pb.ScoreRequest(prompt=pb.TokenIds(ids=tokens), model=model),
                           timeout=120)
    return np.array([list(p.logits) for p in reply.positions], dtype=np.float64)

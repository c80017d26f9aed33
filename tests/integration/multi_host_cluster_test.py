"""Ranks on separate hosts: the coordinator and six workers as seven containers of tpserve's image
(scripts/build-image.sh) on a user-defined bridge network made by the test, the workers two
pipeline stages of three tensor-parallel ranks. Each container has its own address, network
namespace and /dev/shm, so each stage all-reduces through Gloo over the network, and the hidden
states pass from stage to stage through Gloo too; mutual TLS (certificates made here with the
openssl CLI) and the cluster token are on.

From the host, over the published ports: greedy output (HTTP) and Score logits (gRPC with the
cluster CA's client certificate) on the fp32 path match a single-process tp-1 run of the same
model; a worker container killed mid-stream and started again rejoins, and the held streams resume
with the tokens an uninterrupted run gives.

Skips (exit status 77, which ctest counts as skipped), naming why, only where no Docker engine
answers (scripts/docker-engine.sh starts one for scripts/test.sh). Containers and the network are
removed whatever happens.
"""

import http.client
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

from test_certificates import make_certificates
from tpserve_cluster import Cluster, parsed_args, run_tests, score_logits, set_up_scratch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else "docker"
IMAGE = "tpserve:multi-host-test"
PROMPTS = ["The capital of France is", "Write a haiku about the sea."]
MAX_TOKENS = 48
STAGES = 2
WORLD = 3 * STAGES
# fp32 on both sides: what differs is the order of the all-reduce's sums.
LOGIT_TOLERANCE = 1e-3


def docker(*args, timeout=120, check=True):
    result = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])}: {result.stderr.strip()}")
    return result.stdout.strip()


def engine_problem():
    """Why no container can run here, or None."""
    if shutil.which(DOCKER) is None and not os.path.exists(DOCKER):
        return "no docker client (scripts/docker-engine.sh start installs one)"
    try:
        if subprocess.run([DOCKER, "info"], capture_output=True, timeout=15).returncode != 0:
            return "no Docker engine answers (scripts/docker-engine.sh start)"
    except subprocess.TimeoutExpired:
        return "the Docker engine does not answer within 15 s"
    return None


def completion(address, prompt, stream=False, on_chunk=None):
    conn = http.client.HTTPConnection(address, timeout=300)
    conn.request("POST", "/v1/completions", body=json.dumps({
        "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
        "stream": stream}), headers={"Content-Type": "application/json"})
    reply = conn.getresponse()
    if reply.status != 200:
        raise AssertionError(f"HTTP {reply.status}: {reply.read()!r}")
    if not stream:
        text = json.loads(reply.read())["choices"][0]["text"]
        conn.close()
        return text
    text = []
    while True:
        line = reply.readline()
        if not line or line.strip() == b"data: [DONE]":
            break
        if not line.startswith(b"data: "):
            continue
        event = json.loads(line[len(b"data: "):])
        if "error" in event:
            raise AssertionError(f"the stream ended with an error: {event['error']}")
        for choice in event["choices"]:
            text.append(choice["text"])
            if on_chunk is not None:
                on_chunk(len(text))
    conn.close()
    return "".join(text)


class MultiHostCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        set_up_scratch(cls, "tpserve-multi-host-")
        started = time.monotonic()
        build = subprocess.run([f"{ROOT}/scripts/build-image.sh", "--tag", IMAGE,
                                "--bin-dir", cls.args.bin_dir],
                               capture_output=True, text=True, timeout=1200)
        if build.returncode != 0:
            raise AssertionError("scripts/build-image.sh failed:\n" + build.stdout + build.stderr)
        print(build.stdout.strip(), flush=True)
        cls.addClassCleanup(docker, "image", "rm", "-f", IMAGE, check=False)

        suffix = secrets.token_hex(4)
        cls.network = f"tpserve-test-{suffix}"
        cls.coordinator = f"tpserve-{suffix}-coordinator"
        cls.workers = [f"tpserve-{suffix}-worker-{r}" for r in range(WORLD)]
        # Readable by the image's user (uid 10001): throwaway certificates and token.
        cls.secrets = tempfile.mkdtemp(prefix="tpserve-mh-secrets-")
        cls.addClassCleanup(shutil.rmtree, cls.secrets, True)
        make_certificates(cls.secrets, [cls.coordinator] + cls.workers)
        with open(f"{cls.secrets}/token", "w") as f:
            f.write(secrets.token_hex(32))
        os.chmod(cls.secrets, 0o755)
        for name in os.listdir(cls.secrets):
            os.chmod(f"{cls.secrets}/{name}", 0o644)

        docker("network", "create", "--driver", "bridge", cls.network)
        cls.addClassCleanup(docker, "network", "rm", cls.network, check=False)
        cls.addClassCleanup(cls.remove_containers)
        model_dir, model_file = os.path.split(os.path.abspath(cls.args.model))
        cls.model = f"/models/{model_file}"
        common = ["--network", cls.network, "-v", f"{model_dir}:/models:ro",
                  "-v", f"{cls.secrets}:/secrets:ro"]
        tls = ["--cluster-token-file", "/secrets/token", "--tls-cert", "/secrets/node.crt",
               "--tls-key", "/secrets/node.key", "--tls-ca", "/secrets/ca.crt"]
        docker("run", "-d", "--name", cls.coordinator, "--hostname", cls.coordinator, *common,
               "-p", "127.0.0.1::8000", "-p", "127.0.0.1::50051", IMAGE,
               "tpserve-coordinator", "--model", cls.model, "--world-size", str(WORLD),
               "--pipeline-parallel-size", str(STAGES),
               "--host", cls.coordinator, "--port", "50051", "--admin-port", "50052",
               "--http-host", "0.0.0.0", "--http-port", "8000", "--recovery-grace", "120", *tls)
        for rank, name in enumerate(cls.workers):
            docker("run", "-d", "--name", name, "--hostname", name, *common, IMAGE,
                   "tpserve-worker", "--coordinator", f"{cls.coordinator}:50051",
                   "--rank", str(rank), "--model", cls.model, "--host", name, "--port", "50100",
                   "--threads", "1", "--cpu-weights", "fp32", *tls)
        cls.http_address = docker("port", cls.coordinator, "8000/tcp").splitlines()[0]
        cls.grpc_address = docker("port", cls.coordinator, "50051/tcp").splitlines()[0]
        cls.wait_ready(timeout_s=300)
        print(f"cluster of {WORLD + 1} containers ready {time.monotonic() - started:.1f} s after "
              "the image build began", flush=True)

        # The reference: one process, tp 1, fp32, on the host.
        cls.reference = Cluster(cls.args.bin_dir, cls.args.model, tp=1,
                                extra_args=["--cpu-weights", "fp32"])
        cls.reference.__enter__()
        cls.addClassCleanup(cls.reference.__exit__, None, None, None)
        cls.expected = {p: completion(cls.reference.http_address, p) for p in PROMPTS}

    @classmethod
    def remove_containers(cls):
        for name in [cls.coordinator] + cls.workers:
            docker("rm", "-f", name, check=False)

    @classmethod
    def logs(cls, name, lines=30):
        result = subprocess.run([DOCKER, "logs", "--tail", str(lines), name],
                                capture_output=True, text=True, timeout=30)
        return result.stdout + result.stderr

    @classmethod
    def all_logs(cls):
        return "\n".join(f"--- {n}\n{cls.logs(n)}" for n in [cls.coordinator] + cls.workers)

    @classmethod
    def wait_ready(cls, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection(cls.http_address, timeout=2)
            try:
                conn.request("GET", "/health/ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.5)
        raise AssertionError("the container cluster is not ready:\n" + cls.all_logs())

    def tls_channel(self):
        import grpc

        with open(f"{self.secrets}/ca.crt", "rb") as ca, open(f"{self.secrets}/node.key", "rb") \
                as key, open(f"{self.secrets}/node.crt", "rb") as crt:
            credentials = grpc.ssl_channel_credentials(ca.read(), key.read(), crt.read())
        return grpc.secure_channel(self.grpc_address, credentials,
                                   options=[("grpc.max_receive_message_length", 256 << 20)])

    def test_1_ranks_all_reduce_through_gloo_across_hosts(self):
        addresses = set()
        for name in self.workers:
            log = self.logs(name, lines=200)
            self.assertRegex(log, r"all-reduces through Gloo over TCP", name)
            rank = self.workers.index(name)
            self.assertRegex(log, r"pipeline stage %d of %d" % (rank // 3, STAGES), name)
            addresses.add(docker("inspect", "-f",
                                 "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name))
        self.assertEqual(len(addresses), WORLD, f"the workers' addresses: {addresses}")
        self.assertNotIn("", addresses)

    def test_2_greedy_output_equals_tp1(self):
        for prompt in PROMPTS:
            self.assertEqual(completion(self.http_address, prompt), self.expected[prompt], prompt)

    def test_3_score_logits_equal_tp1_over_mutual_tls(self):
        import grpc

        tokens = list(range(100, 140))
        expected = score_logits(self.protos, self.reference, tokens)
        pb = self.protos.inference_pb2
        with self.tls_channel() as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            stub = self.protos.inference_pb2_grpc.InferenceServiceStub(channel)
            reply = stub.Score(pb.ScoreRequest(prompt=pb.TokenIds(ids=tokens)), timeout=120)
        got = np.array([list(p.logits) for p in reply.positions], dtype=np.float64)
        self.assertEqual(got.shape, expected.shape)
        difference = float(np.abs(got - expected).max())
        print(f"Score over {len(tokens)} tokens: largest |logit difference| {difference:.2e}")
        self.assertLessEqual(difference, LOGIT_TOLERANCE)
        np.testing.assert_array_equal(got.argmax(axis=1), expected.argmax(axis=1))
        # Without the CA's client certificate the port refuses the call.
        with grpc.insecure_channel(self.grpc_address) as plain:
            stub = self.protos.inference_pb2_grpc.InferenceServiceStub(plain)
            with self.assertRaises(grpc.RpcError):
                stub.Health(pb.HealthRequest(), timeout=5)

    def test_4_killed_worker_container_rejoins_and_streams_resume(self):
        victim = self.workers[1]
        chunks_seen = threading.Event()
        results, errors = {}, {}

        def run(prompt):
            try:
                results[prompt] = completion(
                    self.http_address, prompt, stream=True,
                    on_chunk=lambda n: n >= 4 and chunks_seen.set())
            except Exception as e:  # reported below
                errors[prompt] = repr(e)

        threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in PROMPTS]
        for t in threads:
            t.start()
        self.assertTrue(chunks_seen.wait(120), "no stream started")
        docker("kill", victim)
        self.assertTrue(any(t.is_alive() for t in threads), "the streams ended before the kill")
        time.sleep(1)
        docker("start", victim)
        for t in threads:
            t.join(300)
            self.assertFalse(t.is_alive(), "a stream did not finish:\n" + self.all_logs())
        self.assertEqual(errors, {}, self.all_logs())
        for prompt in PROMPTS:
            self.assertEqual(results[prompt], self.expected[prompt], prompt)
        resumed = re.findall(r"request \d+: sample \d+ resumed after [0-9.]+ s held.*",
                             self.logs(self.coordinator, lines=400))
        self.assertEqual(len(resumed), len(PROMPTS), "the coordinator did not resume each stream")
        print("\n".join(resumed))


if __name__ == "__main__":
    why = engine_problem()
    if why is not None:
        # ctest reports exit status 77 as skipped (SKIP_RETURN_CODE), with this line as the reason.
        print(f"multi_host_cluster: skipped: {why}")
        sys.exit(77)
    run_tests()

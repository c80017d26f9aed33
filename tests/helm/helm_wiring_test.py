"""helm_wiring: the commands the chart renders start a working cluster. values-cpu-demo.yaml with
tests/helm/values/wiring.yaml (3 worker pods × 3 ranks, tensor parallelism 9) is rendered, and its
pods are run here as processes on 127.0.0.1: each pod's init container (fetch-model.sh, which
finds the model already in place), then the coordinator's command and each worker pod's script,
with the environment the pods get (pods.py) and the chart's addresses and ports mapped to
127.0.0.1 and free ports. The coordinator's rendered readiness and liveness endpoints answer 200,
a completion comes back through the OpenAI API, tpctl in the coordinator pod's environment sees
9 ranks on the admin port, the worker pods' liveness probe passes (and fails for a rank the
coordinator does not list), and each pod stops on SIGTERM, leaving no process behind. Every gRPC
hop runs mutual TLS from the tls Secret's mount (certificates made here with the openssl CLI,
SAN tls.serverName): tpctl without the pod's TLS variables cannot reach the admin port.

In mode lws (wiring-lws.yaml), 2 LeaderWorkerSet groups × 3 ranks run the same way with the
environment LeaderWorkerSet gives each pod, and both groups serve.

    helm_wiring_test.py --renderer BUILD/tests/helm/helm-render --bin-dir BUILD/bin --model M
"""

import json
import os
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import chart
import pods

VALUES = [os.path.join(chart.CHART, "values-cpu-demo.yaml"),
          os.path.join(chart.TEST_VALUES, "wiring.yaml")]
LWS_VALUES = [os.path.join(chart.CHART, "values-cpu-demo.yaml"),
              os.path.join(chart.TEST_VALUES, "wiring-lws.yaml")]
READY_TIMEOUT_S = 180


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def make_certificates(directory, server_name):
    """ca.crt, and tls.crt / tls.key it signed with the SAN `server_name`, as the Secret holds
    them."""
    os.makedirs(directory)
    ext = os.path.join(directory, "ext.cnf")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"
                f"subjectAltName=DNS:{server_name}\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    path = lambda name: os.path.join(directory, name)  # noqa: E731
    for command in (
            ["req", "-x509", *ec, "-days", "2", "-subj", "/CN=tpserve wiring CA",
             "-keyout", path("ca.key"), "-out", path("ca.crt")],
            ["req", *ec, "-subj", "/CN=tpserve wiring", "-keyout", path("tls.key"),
             "-out", path("tls.csr")],
            ["x509", "-req", "-in", path("tls.csr"), "-CA", path("ca.crt"), "-CAkey",
             path("ca.key"), "-CAcreateserial", "-days", "2", "-extfile", ext,
             "-out", path("tls.crt")]):
        subprocess.run(["openssl", *command], check=True, capture_output=True, timeout=30)


def local_coordinator_argv(test, argv, container, grpc_port, http_port, admin_port):
    """The coordinator container's rendered argv with its addresses on 127.0.0.1 and these
    ports."""
    rewrites = {  # flag: (rendered value, local value)
        "--host": ("0.0.0.0", "127.0.0.1"),
        "--http-host": ("0.0.0.0", "127.0.0.1"),
        "--port": (str(chart.named_port(container, "grpc")), str(grpc_port)),
        "--http-port": (str(chart.named_port(container, "http")), str(http_port)),
        "--admin-host": ("0.0.0.0", "127.0.0.1"),
        "--admin-port": (str(chart.named_port(container, "admin")), str(admin_port)),
    }
    for flag, (rendered, local) in rewrites.items():
        i = argv.index(flag) + 1
        test.assertEqual(argv[i], rendered, flag)
        argv[i] = local
    return argv


def wait_ready(test, processes, url):
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        processes.check_alive()
        if http_get(url)[0] == 200:
            return
        time.sleep(0.5)
    test.fail(f"{url} not 200 within {READY_TIMEOUT_S} s: {http_get(url)}")


def rank_step_counts(test, metrics_port, ranks):
    """{rank: steps} from the metrics ports metrics_port .. + ranks - 1 of one worker pod."""
    from prometheus_client.parser import text_string_to_metric_families

    counts = {}
    for local in range(ranks):
        status, text = http_get(f"http://127.0.0.1:{metrics_port + local}/metrics")
        test.assertEqual(status, 200, text)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "tpserve_worker:step_duration_seconds_count":
                    counts[int(sample.labels["rank"])] = sample.value
    return counts


def complete(base_url):
    body = json.dumps({"prompt": "The capital of France is", "max_tokens": 8,
                       "temperature": 0}).encode()
    request = urllib.request.Request(base_url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


class HelmWiringTest(unittest.TestCase):
    def setUp(self):
        self.objects = chart.render(*VALUES)
        self.coordinator_set = chart.one(self.objects, "Deployment", "coordinator")
        self.worker_set = chart.one(self.objects, "StatefulSet", "worker")
        self.tmp = tempfile.TemporaryDirectory(prefix="tpserve-wiring-")
        self.addCleanup(self.tmp.cleanup)
        self.path = [chart.args().bin_dir, os.path.join(chart.REPO, "scripts")]
        self.pods = self.worker_set["spec"]["replicas"]
        self.ranks = chart.ranks_per_pod(self.worker_set)
        self.tls_dir = os.path.join(self.tmp.name, "tls")
        make_certificates(self.tls_dir, chart.values(*VALUES)["tls"]["serverName"])

    def volumes(self, pod):
        tmp = os.path.join(self.tmp.name, pod)
        os.makedirs(tmp, exist_ok=True)
        return {"model": os.path.dirname(os.path.abspath(chart.args().model)), "tmp": tmp,
                "shm": "/dev/shm", "tls": self.tls_dir}

    def run_init_containers(self, workload, pod):
        spec = workload["spec"]["template"]["spec"]
        for init in spec.get("initContainers", []):
            argv, env = pods.local_process(spec, init, pod, self.volumes(pod), self.path,
                                           pods.secrets(self.objects))
            result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 0,
                             f"{pod}/{init['name']}: {result.stdout}{result.stderr}")

    def start_coordinator(self, processes, grpc_port, http_port, admin_port):
        """Starts the coordinator pod on these ports; returns tpctl's environment in it."""
        pod = self.coordinator_set["metadata"]["name"] + "-0"
        self.run_init_containers(self.coordinator_set, pod)
        container = chart.container(self.coordinator_set, "coordinator")
        argv, env = pods.local_process(self.coordinator_set["spec"]["template"]["spec"],
                                       container, pod, self.volumes(pod), self.path,
                                       pods.secrets(self.objects))
        local_coordinator_argv(self, argv, container, grpc_port, http_port, admin_port)
        self.assertEqual(env["TPSERVE_COORDINATOR"],
                         f"127.0.0.1:{chart.named_port(container, 'admin')}")
        env["TPSERVE_COORDINATOR"] = f"127.0.0.1:{admin_port}"
        processes.start(pod, argv, env)
        return env

    def start_worker_pods(self, processes, grpc_port, admin_port, first_port):
        """Starts every worker pod, their ranks on ports from first_port on; returns
        {pod name: env} (what its probes run with)."""
        spec = self.worker_set["spec"]["template"]["spec"]
        container = chart.container(self.worker_set, "worker")
        started = {}
        for ordinal in range(self.pods):
            pod = f"{self.worker_set['metadata']['name']}-{ordinal}"
            self.run_init_containers(self.worker_set, pod)
            argv, env = pods.local_process(spec, container, pod, self.volumes(pod), self.path,
                                           pods.secrets(self.objects))
            # Every pod has an IP of its own; here they share 127.0.0.1, so each gets its ports.
            env["TPSERVE_WORKER_PORT"] = str(first_port + ordinal * self.ranks)
            env["TPSERVE_METRICS_PORT"] = str(first_port + (self.pods + ordinal) * self.ranks)
            # helm_render checks that these are the coordinator's headless Service.
            for variable, port in (("TPSERVE_CLUSTER_ADDRESS", grpc_port),
                                   ("TPSERVE_COORDINATOR", admin_port)):
                host = env[variable].rsplit(":", 1)[0]
                self.assertTrue(host.endswith(".svc.cluster.local"), host)
                env[variable] = f"127.0.0.1:{port}"
            processes.start(pod, argv, env)
            started[pod] = env
        return started

    def run_probe(self, probe, env):
        return subprocess.run(probe["exec"]["command"], env=env, capture_output=True, text=True,
                              timeout=probe["timeoutSeconds"] + 5)

    def test_rendered_pods_serve_a_completion(self):
        container = chart.container(self.coordinator_set, "coordinator")
        worker = chart.container(self.worker_set, "worker")
        world_size = int(chart.flag(container["command"], "--world-size"))
        self.assertEqual(world_size, self.pods * self.ranks)
        # One block for every port, so that no two processes are given the same one.
        grpc_port = pods.free_ports(3 + 2 * world_size)
        http_port, admin_port = grpc_port + 1, grpc_port + 2
        with pods.Processes() as processes:
            tpctl_env = self.start_coordinator(processes, grpc_port, http_port, admin_port)
            worker_envs = self.start_worker_pods(processes, grpc_port, admin_port, grpc_port + 3)
            base = f"http://127.0.0.1:{http_port}"
            wait_ready(self, processes, base + container["readinessProbe"]["httpGet"]["path"])
            self.assertEqual(http_get(base + container["livenessProbe"]["httpGet"]["path"])[0], 200)

            completion = complete(base)
            self.assertTrue(completion["choices"][0]["text"].strip(), completion)

            status = subprocess.run(["tpctl", "status"], env=tpctl_env, capture_output=True,
                                    text=True, timeout=30)
            self.assertEqual(status.returncode, 0, status.stderr)
            self.assertIn(f"cluster serving: {world_size} ranks", status.stdout)
            plaintext = {k: v for k, v in tpctl_env.items() if not k.startswith("TPSERVE_TLS_")}
            refused = subprocess.run(["tpctl", "--timeout", "2", "status"], env=plaintext,
                                     capture_output=True, text=True, timeout=30)
            self.assertNotEqual(refused.returncode, 0, refused.stdout)
            self.assertIn(f"cannot reach coordinator at 127.0.0.1:{admin_port}", refused.stderr)

            # Every rank's metrics port counts the steps it ran.
            steps = {}
            for env in worker_envs.values():
                steps.update(rank_step_counts(self, int(env["TPSERVE_METRICS_PORT"]), self.ranks))
            self.assertEqual(sorted(steps), list(range(world_size)))
            self.assertTrue(all(n > 0 for n in steps.values()), steps)

            for pod, env in worker_envs.items():
                for probe in ("startupProbe", "livenessProbe"):
                    result = self.run_probe(worker[probe], env)
                    self.assertEqual(result.returncode, 0, f"{pod} {probe}: {result.stdout}")
            unknown = dict(env, TPSERVE_WORKER_PORT=str(pods.free_ports(self.ranks)))
            result = self.run_probe(worker["livenessProbe"], unknown)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("does not list 127.0.0.1:", result.stdout)

            for pod in worker_envs:
                self.assertEqual(processes.terminate(pod), 0, processes.log(pod))
            coordinator_pod = self.coordinator_set["metadata"]["name"] + "-0"
            self.assertEqual(processes.terminate(coordinator_pod), 0,
                             processes.log(coordinator_pod))


class HelmWiringLwsTest(unittest.TestCase):
    """Mode lws (wiring-lws.yaml): 2 LeaderWorkerSet groups of 3 pods, one rank each. Every pod
    runs here with the environment LeaderWorkerSet gives it (LWS_LEADER_ADDRESS 127.0.0.1, its
    index and the group size), each group on ports of its own: both groups serve a completion,
    and each coordinator lists its own 3 ranks."""

    def setUp(self):
        self.objects = chart.render(*LWS_VALUES)
        self.lws = chart.one(self.objects, "LeaderWorkerSet")
        template = self.lws["spec"]["leaderWorkerTemplate"]
        self.size = template["size"]
        self.templates = [template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]]
        self.tmp = tempfile.TemporaryDirectory(prefix="tpserve-wiring-lws-")
        self.addCleanup(self.tmp.cleanup)
        self.path = [chart.args().bin_dir, os.path.join(chart.REPO, "scripts")]

    def start_pod(self, processes, pod_spec, pod, first_env, ports):
        """Runs the pod's init containers, then starts its containers; returns {container: env}."""
        tmp = os.path.join(self.tmp.name, pod)
        os.makedirs(tmp)
        volumes = {"model": os.path.dirname(os.path.abspath(chart.args().model)), "tmp": tmp,
                   "shm": "/dev/shm"}
        secret_values = pods.secrets(self.objects)
        for init in pod_spec.get("initContainers", []):
            argv, env = pods.local_process(pod_spec, init, pod, volumes, self.path, secret_values,
                                           first_env)
            result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 0, f"{pod}/{init['name']}: {result.stderr}")
        envs = {}
        for container in pod_spec["containers"]:
            argv, env = pods.local_process(pod_spec, container, pod, volumes, self.path,
                                           secret_values, first_env)
            if container["name"] == "coordinator":
                local_coordinator_argv(self, argv, container, ports["grpc"], ports["http"],
                                       ports["admin"])
                self.assertEqual(env["TPSERVE_COORDINATOR"],
                                 f"127.0.0.1:{ports['rendered']['admin']}")
                env["TPSERVE_COORDINATOR"] = f"127.0.0.1:{ports['admin']}"
            else:
                # The leader's address and the coordinator's ports, as LeaderWorkerSet expands
                # them; here each group's coordinator has ports of its own.
                for variable, name in (("TPSERVE_CLUSTER_ADDRESS", "grpc"),
                                       ("TPSERVE_COORDINATOR", "admin")):
                    self.assertEqual(env[variable], f"127.0.0.1:{ports['rendered'][name]}")
                    env[variable] = f"127.0.0.1:{ports[name]}"
                env["TPSERVE_WORKER_PORT"] = str(ports["worker"])
                env["TPSERVE_METRICS_PORT"] = str(ports["metrics"])
            name = f"{pod}/{container['name']}"
            processes.start(name.replace("/", "."), argv, env)
            envs[container["name"]] = env
        return envs

    def test_both_groups_serve(self):
        coordinator = self.templates[0]["containers"][0]
        rendered = {name: chart.named_port(coordinator, name) for name in ("grpc", "http", "admin")}
        replicas = self.lws["spec"]["replicas"]
        self.assertEqual(replicas, 2)
        first = pods.free_ports(replicas * (3 + 2 * self.size))
        groups = []
        with pods.Processes() as processes:
            for group in range(replicas):
                base = first + group * (3 + 2 * self.size)
                ports = {"grpc": base, "http": base + 1, "admin": base + 2, "rendered": rendered}
                leader = f"{self.lws['metadata']['name']}-{group}"
                for index in range(self.size):
                    first_env = {"LWS_LEADER_ADDRESS": "127.0.0.1",
                                 "LWS_WORKER_INDEX": str(index), "LWS_GROUP_SIZE": str(self.size)}
                    pod = leader if index == 0 else f"{leader}-{index}"
                    envs = self.start_pod(processes, self.templates[min(index, 1)], pod,
                                          first_env, dict(ports, worker=base + 3 + index,
                                                          metrics=base + 3 + self.size + index))
                    if index == 0:
                        groups.append((f"http://127.0.0.1:{ports['http']}", envs["coordinator"]))
            for base_url, tpctl_env in groups:
                wait_ready(self, processes, base_url + "/health/ready")
                completion = complete(base_url)
                self.assertTrue(completion["choices"][0]["text"].strip(), completion)
                status = subprocess.run(["tpctl", "status"], env=tpctl_env, capture_output=True,
                                        text=True, timeout=30)
                self.assertEqual(status.returncode, 0, status.stderr)
                self.assertIn(f"cluster serving: {self.size} ranks", status.stdout)
            for group in range(replicas):
                base = first + group * (3 + 2 * self.size)
                steps = {}
                for index in range(self.size):
                    steps.update(rank_step_counts(self, base + 3 + self.size + index, 1))
                self.assertEqual(sorted(steps), list(range(self.size)), f"group {group}")
                self.assertTrue(all(n > 0 for n in steps.values()), steps)
            for name in list(processes.running):
                self.assertEqual(processes.terminate(name), 0, processes.log(name))


if __name__ == "__main__":
    chart.run_tests()

"""helm_render: the tpserve chart, rendered with six value sets in mode statefulset and one in mode
lws, gives objects that Kubernetes 1.31 accepts and that fit together; bad values fail with
values.schema.json's message; the Llama-3-70B values start 16 ranks on 2 pods × 8 GPUs.

The other CRDs (PrometheusRule, PodMonitor, LeaderWorkerSet, InferencePool) are checked for their
shape and wiring only: their schemas live in their projects' GitHub releases, which this build
machine cannot reach.

For every value set: each object validates against kubernetes-validate's strict 1.31 schemas
(the ServiceMonitor, a CRD, against servicemonitor.schema.json); names and labels follow
Kubernetes' limits and app.kubernetes.io conventions; Service and PodDisruptionBudget selectors
select pods, Service ports reach container ports, the workers' coordinator address is the
coordinator's headless Service and gRPC port, tpctl's is its admin port, which only the headless
Service carries; the NetworkPolicies let worker ports accept only the coordinator (gRPC) and peer
workers, and the admin port only workers and networkPolicy.adminFrom; TLS and credentials come
from Secrets into every server; containers run as non-root on a read-only root;
and the worker pods' rendered script, run for every ordinal with a stand-in tpserve-worker on
PATH, starts ranks 0..tensorParallelSize × pipelineParallelSize - 1 exactly once, and the
coordinator is told both sizes.

    helm_render_test.py --renderer BUILD/tests/helm/helm-render --bin-dir BUILD/bin --model M
"""

import base64
import glob
import json
import os
import re
import signal
import tempfile
import time
import unittest

import jsonschema
import kubernetes_validate
import yaml

import chart
import pods

KUBERNETES_VERSION = "1.31"
LONG_RELEASE = "inference-production-smollm2-chat-assistant-eu-west1a"  # 53: helm's most
VALUE_SETS = {  # name: (values files, release)
    "defaults": ([], "tpserve"),
    "cpu-demo": ([os.path.join(chart.CHART, "values-cpu-demo.yaml")], "demo"),
    "llama3-70b-2x8": ([os.path.join(chart.CHART, "values-llama3-70b-2x8.yaml")], "llama3"),
    "hostpath-monitoring": ([os.path.join(chart.TEST_VALUES, "hostpath-monitoring.yaml")], "llm"),
    "pvc-long-names": ([os.path.join(chart.TEST_VALUES, "pvc-long-names.yaml")], LONG_RELEASE),
    "wiring": ([os.path.join(chart.CHART, "values-cpu-demo.yaml"),
                os.path.join(chart.TEST_VALUES, "wiring.yaml")], "tpserve"),
}
# Bad values and the line of values.schema.json's verdict that must name what is wrong.
BAD_VALUES = [
    ({"tensorParallelSize": 12, "workers": {"gpusPerNode": 8}},
     "- tensorParallelSize: Must be a multiple of 8"),
    ({"tensorParallelSize": 3, "workers": {"gpusPerNode": 2}},
     "- tensorParallelSize: Must be a multiple of 2"),
    ({"model": {"source": None}}, "- model: source is required"),
    ({"model": {"source": ""}},
     '- model.source: model.source must be one of the following: "pvc", "hostPath", "download"'),
    ({"model": {"source": "pvc"}},
     "- model.pvc.claimName: String length must be greater than or equal to 1"),
    ({"model": {"source": "hostPath", "hostPath": {"path": "models"}}},
     "- model.hostPath.path: Does not match pattern '^/'"),
    ({"device": "tpu"}, '- device: device must be one of the following: "cpu", "cuda"'),
    ({"workers": {"gpusPerNode": 0}}, "- workers.gpusPerNode: Must be greater than or equal to 1"),
    ({"tensorParalelSize": 2}, "- (root): Additional property tensorParalelSize is not allowed"),
    ({"tls": {"serverName": ""}},
     "- tls.serverName: String length must be greater than or equal to 1"),
    ({"networkPolicy": {"enabled": "yes"}},
     "- networkPolicy.enabled: Invalid type. Expected: boolean, given: string"),
    ({"coordinator": {"adminPort": 0}},
     "- coordinator.adminPort: Must be greater than or equal to 1"),
    ({"replicas": 2}, '- mode: mode does not match: "lws"'),
    ({"autoscaling": {"enabled": True}}, '- mode: mode does not match: "lws"'),
    ({"mode": "lws", "lws": {"restartPolicy": "Always"}},
     '- lws.restartPolicy: lws.restartPolicy must be one of the following: "None", '
     '"RecreateGroupOnPodRestart"'),
]
# Mode lws: LeaderWorkerSet groups, rendered from values-cpu-demo.yaml with wiring-lws.yaml.
LWS_VALUES = [os.path.join(chart.CHART, "values-cpu-demo.yaml"),
              os.path.join(chart.TEST_VALUES, "wiring-lws.yaml")]
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
STANDARD_LABELS = ["app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/version", "app.kubernetes.io/managed-by"]
# Stands in for tpserve-worker: records its arguments, then waits to be stopped.
FAKE_WORKER = """#!/bin/sh
record="$FAKE_WORKER_DIR/$$"
printf '%s\\n' "$@" > "$record.tmp" && mv "$record.tmp" "$record.args"
exec sleep 600
"""


class WorkerPod:
    """A worker pod's "worker" container, run here with the stand-in tpserve-worker: started()
    returns once every rank it started has recorded its arguments. The pod is the worker
    StatefulSet's of one ordinal, or (`pod_spec`, `name`, `first_env`) one of a LeaderWorkerSet
    group with LeaderWorkerSet's environment."""

    def __init__(self, processes, worker_set, ordinal, workdir, secret_values, pod_spec=None,
                 name=None, first_env=None):
        self.processes = processes
        self.name = name or f"{worker_set['metadata']['name']}-{ordinal}"
        pod_spec = pod_spec or worker_set["spec"]["template"]["spec"]
        self.container = next(c for c in pod_spec["containers"] if c["name"] == "worker")
        self.ranks = sum(p["name"].startswith("rank") for p in self.container["ports"])
        self.record_dir = os.path.join(workdir, self.name)
        os.mkdir(self.record_dir)
        # The stand-in reads nothing: every volume but the model and /dev/shm is the work dir.
        volumes = {v["name"]: workdir for v in pod_spec["volumes"]}
        volumes.update(model="/models", shm="/dev/shm")
        argv, env = pods.local_process(pod_spec, self.container, self.name, volumes, [workdir],
                                       secret_values, first_env)
        env["FAKE_WORKER_DIR"] = self.record_dir
        self.env = env
        self.process = processes.start(self.name, argv, env)

    def started(self, timeout=20):
        """{pid: argv} of the ranks, once all have started."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = glob.glob(os.path.join(self.record_dir, "*.args"))
            if len(records) == self.ranks:
                return {int(os.path.basename(r).split(".")[0]): read_lines(r) for r in records}
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name} started {len(records)} of {self.ranks} ranks:\n"
                             + self.processes.log(self.name))


def read_lines(path):
    with open(path) as f:
        return f.read().splitlines()


def fake_worker_dir(test):
    workdir = tempfile.TemporaryDirectory(prefix="tpserve-fake-worker-")
    test.addCleanup(workdir.cleanup)
    fake = os.path.join(workdir.name, "tpserve-worker")
    with open(fake, "w") as f:
        f.write(FAKE_WORKER)
    os.chmod(fake, 0o755)
    return workdir.name


class HelmRenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(os.path.dirname(__file__), "servicemonitor.schema.json")) as f:
            cls.service_monitor_schema = json.load(f)
        cls.rendered = {name: chart.render(*files, release=release)
                        for name, (files, release) in VALUE_SETS.items()}

    def test_values_schema_is_draft7(self):
        with open(os.path.join(chart.CHART, "values.schema.json")) as f:
            jsonschema.Draft7Validator.check_schema(json.load(f))

    def test_objects_validate_against_kubernetes_schemas(self):
        for name, objects in self.rendered.items():
            kinds = sorted(o["kind"] for o in objects)
            self.assertIn("StatefulSet", kinds, name)
            for o in objects:
                with self.subTest(values=name, object=f"{o['kind']}/{o['metadata']['name']}"):
                    if o["kind"] == "ServiceMonitor":
                        jsonschema.validate(o, self.service_monitor_schema)
                    elif o["kind"] == "PrometheusRule":
                        self.check_prometheus_rule(o)
                    elif o["kind"] == "PodMonitor":
                        self.check_pod_monitor(o, objects)
                    else:
                        kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)

    def test_names_and_labels(self):
        for name, objects in self.rendered.items():
            seen = set()
            for o in objects:
                meta = o["metadata"]
                with self.subTest(values=name, object=f"{o['kind']}/{meta['name']}"):
                    self.assertNotIn((o["kind"], meta["name"]), seen)
                    seen.add((o["kind"], meta["name"]))
                    self.assertRegex(meta["name"], DNS_LABEL)
                    # A StatefulSet's pods carry controller-revision-hash=<name>-<10 chars>.
                    limit = 52 if o["kind"] == "StatefulSet" else 63
                    self.assertLessEqual(len(meta["name"]), limit)
                    for label in STANDARD_LABELS:
                        self.assertIn(label, meta["labels"])
                    self.assertEqual(meta["labels"]["app.kubernetes.io/instance"],
                                     VALUE_SETS[name][1])

    def test_selectors_and_ports_connect(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                self.check_wiring(objects)

    def check_wiring(self, objects):
        workloads = chart.find(objects, "Deployment") + chart.find(objects, "StatefulSet")
        pod_labels = {w["metadata"]["name"]: w["spec"]["template"]["metadata"]["labels"]
                      for w in workloads}
        for w in workloads:
            self.assertTrue(chart.selects(w["spec"]["selector"]["matchLabels"],
                                          pod_labels[w["metadata"]["name"]]))

        def selected(selector):
            found = [w for w in workloads
                     if chart.selects(selector, pod_labels[w["metadata"]["name"]])]
            self.assertEqual(len(found), 1, f"{selector} selects {len(found)} workloads")
            return found[0]

        for service in chart.find(objects, "Service"):
            workload = selected(service["spec"]["selector"])
            ports = {p["name"]: p["containerPort"]
                     for c in workload["spec"]["template"]["spec"]["containers"]
                     for p in c.get("ports", [])}
            for port in service["spec"]["ports"]:
                self.assertIn(port["targetPort"], ports, service["metadata"]["name"])
        for pdb in chart.find(objects, "PodDisruptionBudget"):
            selected(pdb["spec"]["selector"]["matchLabels"])
            # A drain must be able to finish: one pod of each kind at a time.
            self.assertEqual(pdb["spec"]["maxUnavailable"], 1, pdb["metadata"]["name"])

        coordinator_set = chart.one(objects, "Deployment", "coordinator")
        coordinator = chart.container(coordinator_set, "coordinator")
        self.assertEqual(chart.flag(coordinator["command"], "--port"),
                         str(chart.named_port(coordinator, "grpc")))
        self.assertEqual(chart.flag(coordinator["command"], "--admin-port"),
                         str(chart.named_port(coordinator, "admin")))
        self.assertEqual(chart.env_value(coordinator, "TPSERVE_COORDINATOR"),
                         f"127.0.0.1:{chart.named_port(coordinator, 'admin')}")
        self.assertEqual(chart.flag(coordinator["command"], "--http-port"),
                         str(chart.named_port(coordinator, "http")))
        for probe in ("livenessProbe", "readinessProbe"):
            self.assertEqual(coordinator[probe]["httpGet"]["port"], "http")
        headless = [s for s in chart.find(objects, "Service", "coordinator")
                    if s["spec"].get("clusterIP") == "None"]
        self.assertEqual(len(headless), 1)
        self.assertTrue(headless[0]["spec"]["publishNotReadyAddresses"])
        headless_ports = {p["targetPort"]: p["port"] for p in headless[0]["spec"]["ports"]}
        self.assertEqual(set(headless_ports), {"grpc", "admin"})
        # The clients' Service: the client APIs only.
        for service in chart.find(objects, "Service", "coordinator"):
            if service["spec"].get("clusterIP") != "None":
                self.assertEqual({p["targetPort"] for p in service["spec"]["ports"]},
                                 {"grpc", "http"}, service["metadata"]["name"])
        namespace = "default"
        worker = chart.container(chart.one(objects, "StatefulSet", "worker"), "worker")
        headless_host = f"{headless[0]['metadata']['name']}.{namespace}.svc.cluster.local"
        self.assertEqual(chart.env_value(worker, "TPSERVE_CLUSTER_ADDRESS"),
                         f"{headless_host}:{headless_ports['grpc']}")
        self.assertEqual(chart.env_value(worker, "TPSERVE_COORDINATOR"),
                         f"{headless_host}:{headless_ports['admin']}")

        # Both read the model where the model volume is mounted.
        model_mount = next(m["mountPath"] for m in worker["volumeMounts"] if m["name"] == "model")
        self.assertIn({"name": "model", "mountPath": model_mount, "readOnly": True},
                      coordinator["volumeMounts"])
        self.assertEqual(chart.flag(coordinator["command"], "--model"),
                         chart.env_value(worker, "TPSERVE_MODEL"))
        self.assertTrue(chart.env_value(worker, "TPSERVE_MODEL").startswith(model_mount + "/"))

        for monitor in chart.find(objects, "ServiceMonitor"):
            service = [s for s in chart.find(objects, "Service")
                       if chart.selects(monitor["spec"]["selector"]["matchLabels"],
                                        s["metadata"]["labels"])
                       and "metrics" in [p["name"] for p in s["spec"]["ports"]]]
            self.assertEqual(len(service), 1)
        accounts = {a["metadata"]["name"] for a in chart.find(objects, "ServiceAccount")}
        for w in workloads:
            spec = w["spec"]["template"]["spec"]
            if accounts:
                self.assertIn(spec["serviceAccountName"], accounts)
            self.assertTrue(spec["securityContext"]["runAsNonRoot"])
            for c in spec["containers"] + spec.get("initContainers", []):
                self.assertTrue(c["securityContext"]["readOnlyRootFilesystem"], c["name"])
                self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"], c["name"])

    def test_worker_pods_start_every_rank_once(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                coordinator = chart.container(chart.one(objects, "Deployment", "coordinator"),
                                              "coordinator")
                world_size = int(chart.flag(coordinator["command"], "--world-size"))
                stages = int(chart.flag(coordinator["command"], "--pipeline-parallel-size"))
                self.assertEqual(stages, 2 if name == "pvc-long-names" else 1)
                self.assertEqual(world_size % stages, 0)
                ranks = sorted(int(chart.flag(argv, "--rank"))
                               for argv in self.run_all_worker_pods(objects))
                self.assertEqual(ranks, list(range(world_size)))

    def run_all_worker_pods(self, objects):
        """The argv of every rank of every worker pod; checks each rank's flags on the way."""
        worker_set = chart.one(objects, "StatefulSet", "worker")
        workdir = fake_worker_dir(self)
        started = []
        with pods.Processes() as processes:
            for ordinal in range(worker_set["spec"]["replicas"]):
                pod = WorkerPod(processes, worker_set, ordinal, workdir, pods.secrets(objects))
                for argv in pod.started().values():
                    self.check_rank_flags(pod, ordinal, argv)
                    started.append(argv)
                self.assertEqual(processes.terminate(pod.name), 0, processes.log(pod.name))
        return started

    def check_rank_flags(self, pod, ordinal, argv):
        local = int(chart.flag(argv, "--local-rank"))
        self.assertEqual(int(chart.flag(argv, "--rank")), ordinal * pod.ranks + local)
        self.assertEqual(chart.flag(argv, "--host"), pod.env["POD_IP"])
        self.assertEqual(int(chart.flag(argv, "--port")),
                         int(pod.env["TPSERVE_WORKER_PORT"]) + local)
        self.assertEqual(chart.flag(argv, "--coordinator"), pod.env["TPSERVE_CLUSTER_ADDRESS"])
        self.assertEqual(chart.flag(argv, "--model"), pod.env["TPSERVE_MODEL"])
        self.assertIn(int(chart.flag(argv, "--port")),
                      [p["containerPort"] for p in pod.container["ports"]])

    def test_network_policies(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                policies = chart.find(objects, "NetworkPolicy")
                values = chart.values(*VALUE_SETS[name][0])
                if not values["networkPolicy"]["enabled"]:
                    self.assertEqual(policies, [])
                    continue
                self.check_network_policies(objects, values)

    def check_network_policies(self, objects, values):
        coordinator_set = chart.one(objects, "Deployment", "coordinator")
        worker_set = chart.one(objects, "StatefulSet", "worker")
        coordinator = chart.container(coordinator_set, "coordinator")
        worker = chart.container(worker_set, "worker")
        coordinator_pod = coordinator_set["spec"]["template"]["metadata"]["labels"]
        worker_pod = worker_set["spec"]["template"]["metadata"]["labels"]

        def policy_for(pod_labels):
            found = [p for p in chart.find(objects, "NetworkPolicy")
                     if chart.selects(p["spec"]["podSelector"]["matchLabels"], pod_labels)]
            self.assertEqual(len(found), 1)
            self.assertEqual(found[0]["spec"]["policyTypes"], ["Ingress"])
            return found[0]["spec"]["ingress"]

        def admitted(rules, pod_labels, port):
            # A rule without `from` admits every source; without `ports`, every port.
            for rule in rules:
                sources = rule.get("from")
                by_source = sources is None or any(
                    "podSelector" in s and chart.selects(s["podSelector"]["matchLabels"],
                                                         pod_labels) for s in sources)
                ports = rule.get("ports")
                if by_source and (ports is None or any(p["port"] == port for p in ports)):
                    return True
            return False

        outsider = {"app.kubernetes.io/name": "something-else"}
        worker_ports = [p["containerPort"] for p in worker["ports"] if p["name"].startswith("rank")]
        metrics_ports = [p["containerPort"] for p in worker["ports"]
                         if p["name"].startswith("metrics")]
        self.assertEqual(len(metrics_ports), len(worker_ports))
        rules = policy_for(worker_pod)
        for port in worker_ports:
            self.assertTrue(admitted(rules, coordinator_pod, port), port)
            self.assertTrue(admitted(rules, worker_pod, port), port)
            self.assertFalse(admitted(rules, outsider, port), port)
        # Gloo and NCCL listen on ports the kernel picks: peers reach any port, the coordinator
        # only the gRPC ones.
        self.assertTrue(admitted(rules, worker_pod, 45678))
        self.assertFalse(admitted(rules, coordinator_pod, 45678))
        # The metrics ports serve GET /metrics alone: scrapers come from anywhere.
        for port in metrics_ports:
            self.assertTrue(admitted(rules, outsider, port), port)

        rules = policy_for(coordinator_pod)
        admin = chart.named_port(coordinator, "admin")
        self.assertTrue(admitted(rules, worker_pod, admin))
        self.assertFalse(admitted(rules, outsider, admin))
        self.assertFalse(admitted(rules, coordinator_pod, admin))
        for port in (chart.named_port(coordinator, "grpc"), chart.named_port(coordinator, "http")):
            self.assertTrue(admitted(rules, outsider, port), port)
        admin_rule = next(r for r in rules if r.get("ports") == [{"protocol": "TCP", "port": admin}])
        extra = [s for s in admin_rule["from"] if "podSelector" not in s]
        self.assertEqual(extra, values["networkPolicy"]["adminFrom"])

    def test_tls_and_credentials_from_secrets(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                values = chart.values(*VALUE_SETS[name][0])
                coordinator_set = chart.one(objects, "Deployment", "coordinator")
                worker_set = chart.one(objects, "StatefulSet", "worker")
                for workload, container_name in ((coordinator_set, "coordinator"),
                                                 (worker_set, "worker")):
                    self.check_tls(workload, chart.container(workload, container_name), values)
                coordinator = chart.container(coordinator_set, "coordinator")
                for variable, value in (("TPSERVE_API_KEY", "apiKeys"),
                                        ("TPSERVE_ADMIN_KEY", "adminKey")):
                    entries = [e for e in coordinator["env"] if e["name"] == variable]
                    secret = values[value]["existingSecret"]
                    if not secret:
                        self.assertEqual(entries, [])
                        continue
                    self.assertEqual(entries[0]["valueFrom"]["secretKeyRef"]["name"], secret)
                # Nothing secret in a command line, which `ps` shows to every local user.
                for workload in (coordinator_set, worker_set):
                    for c in workload["spec"]["template"]["spec"]["containers"]:
                        self.assertFalse([a for a in c["command"] if "--api-key" in a
                                          or "--tls-key" in a or "token" in a.lower()])

    def check_tls(self, workload, container, values):
        env = {e["name"]: e.get("value") for e in container["env"]}
        secret = values["tls"]["existingSecret"]
        tls_vars = {v for v in env if v.startswith("TPSERVE_TLS_")}
        if not secret:
            self.assertEqual(tls_vars, set())
            return
        volume = next(v for v in workload["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == "tls")
        self.assertEqual(volume["secret"]["secretName"], secret)
        self.assertEqual({i["key"] for i in volume["secret"]["items"]},
                         {"ca.crt", "tls.crt", "tls.key"})
        mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
        self.assertTrue(mount["readOnly"])
        self.assertEqual(env["TPSERVE_TLS_CERT"], mount["mountPath"] + "/tls.crt")
        self.assertEqual(env["TPSERVE_TLS_KEY"], mount["mountPath"] + "/tls.key")
        self.assertEqual(env["TPSERVE_TLS_CA"], mount["mountPath"] + "/ca.crt")
        self.assertEqual(env["TPSERVE_TLS_SERVER_NAME"], values["tls"]["serverName"])

    def test_llama3_70b_on_2_nodes_by_8_gpus(self):
        objects = self.rendered["llama3-70b-2x8"]
        worker_set = chart.one(objects, "StatefulSet", "worker")
        self.assertEqual(worker_set["spec"]["replicas"], 2)
        self.assertEqual(chart.ranks_per_pod(worker_set), 8)
        worker = chart.container(worker_set, "worker")
        self.assertEqual(worker["resources"]["limits"]["nvidia.com/gpu"], 8)
        coordinator = chart.container(chart.one(objects, "Deployment", "coordinator"),
                                      "coordinator")
        self.assertEqual(chart.flag(coordinator["command"], "--world-size"), "16")
        self.assertEqual(chart.flag(coordinator["command"], "--device"), "cuda")
        by_pod = {}
        for argv in self.run_all_worker_pods(objects):
            self.assertEqual(chart.flag(argv, "--gpu-memory-utilization"), "0.9")
            rank, local = int(chart.flag(argv, "--rank")), int(chart.flag(argv, "--local-rank"))
            by_pod.setdefault(rank // 8, []).append((local, rank))
        self.assertEqual(sorted(by_pod[0]), [(local, local) for local in range(8)])
        self.assertEqual(sorted(by_pod[1]), [(local, 8 + local) for local in range(8)])

    def check_prometheus_rule(self, rule):
        """The PrometheusRule's shape (its CRD's schema is not reachable from here: see
        docs/DEPLOY.md): groups of named rules, each an alert with an expression and a
        severity."""
        self.assertEqual(rule["apiVersion"], "monitoring.coreos.com/v1")
        for group in rule["spec"]["groups"]:
            self.assertTrue(group["name"])
            for r in group["rules"]:
                self.assertEqual(set(r) - {"alert", "expr", "for", "labels", "annotations"}, set())
                self.assertRegex(r["alert"], r"^Tpserve[A-Za-z]+$")
                self.assertIn(r["labels"]["severity"], ("warning", "critical"))
                self.assertIn("tpserve:", r["expr"])

    def check_pod_monitor(self, monitor, objects):
        """The PodMonitor selects the pods that run ranks and scrapes each rank's metrics port
        (its CRD's schema is not reachable from here either)."""
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        worker_set = chart.one(objects, "StatefulSet", "worker")
        template = worker_set["spec"]["template"]
        self.assertTrue(chart.selects(monitor["spec"]["selector"]["matchLabels"],
                                      template["metadata"]["labels"]))
        ports = {p["name"] for p in chart.container(worker_set, "worker")["ports"]}
        scraped = [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]]
        self.assertEqual(sorted(scraped), sorted(p for p in ports if p.startswith("metrics")))

    def test_dashboard_and_alerts(self):
        with open(os.path.join(chart.CHART, "dashboards", "tpserve.json")) as f:
            dashboard = json.load(f)
        self.assertEqual(chart.find(self.rendered["defaults"], "ConfigMap"), [])
        self.assertEqual(chart.find(self.rendered["defaults"], "PrometheusRule"), [])
        objects = self.rendered["hostpath-monitoring"]
        config_map = chart.one(objects, "ConfigMap")
        self.assertEqual(config_map["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(json.loads(config_map["data"]["tpserve.json"]), dashboard)
        alerts = [r["alert"] for g in chart.one(objects, "PrometheusRule")["spec"]["groups"]
                  for r in g["rules"]]
        self.assertEqual(alerts, ["TpserveClusterDegraded", "TpserveRankRecovered",
                                  "TpserveQueueHigh", "TpserveKvCacheFull"])

    def test_renders_as_a_subchart(self):
        """A parent chart passes its `global` values down: the schema lets them through."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="tpserve-global-") as f:
            yaml.safe_dump({"global": {"imageRegistry": "registry.example.com"}}, f)
            f.flush()
            objects = chart.render(f.name)
        self.assertEqual(len(chart.find(objects, "StatefulSet")), 1)

    def test_pod_placement_and_extras(self):
        objects = self.rendered["hostpath-monitoring"]
        for workload in (chart.one(objects, "Deployment", "coordinator"),
                         chart.one(objects, "StatefulSet", "worker")):
            spec = workload["spec"]["template"]["spec"]
            with self.subTest(workload=workload["metadata"]["name"]):
                self.assertEqual(spec["runtimeClassName"], "nvidia")
                self.assertEqual(spec["priorityClassName"], "inference-critical")
                self.assertEqual(spec["topologySpreadConstraints"][0]["topologyKey"],
                                 "topology.kubernetes.io/zone")
                self.assertIn({"name": "cache", "emptyDir": {}}, spec["volumes"])
                for container in spec["containers"]:
                    self.assertIn({"name": "HF_HUB_OFFLINE", "value": "1"}, container["env"])
                    self.assertIn({"name": "cache", "mountPath": "/cache"},
                                  container["volumeMounts"])
        spec = chart.one(self.rendered["defaults"], "StatefulSet", "worker")["spec"]["template"]
        self.assertNotIn("runtimeClassName", spec["spec"])

    def test_metric_names(self):
        for values, names in [("defaults", "tpserve"), ("hostpath-monitoring", "vllm")]:
            coordinator = chart.container(
                chart.one(self.rendered[values], "Deployment", "coordinator"), "coordinator")
            self.assertEqual(chart.flag(coordinator["command"], "--metrics-names"), names, values)

    def test_worker_pod_stops_when_a_rank_dies(self):
        objects = self.rendered["llama3-70b-2x8"]
        worker_set = chart.one(objects, "StatefulSet", "worker")
        workdir = fake_worker_dir(self)
        with pods.Processes() as processes:
            pod = WorkerPod(processes, worker_set, 1, workdir, pods.secrets(objects))
            pid = next(pid for pid, argv in pod.started().items()
                       if chart.flag(argv, "--local-rank") == "3")
            os.kill(pid, signal.SIGKILL)
            status = pod.process.wait(timeout=20)
            self.assertEqual(status, 128 + signal.SIGKILL, processes.log(pod.name))
            self.assertIn("rank 11 exited with status 137; stopping the others",
                          processes.log(pod.name))
            self.assertFalse(pods.group_alive(pod.process.pid), "ranks left running")

    def test_cluster_token_is_kept_across_upgrades(self):
        def token(objects):
            secret = next(o for o in chart.find(objects, "Secret")
                          if o["metadata"]["name"].endswith("-cluster-token"))
            self.assertEqual(secret["metadata"]["annotations"]["helm.sh/resource-policy"], "keep")
            return secret["data"]["token"]

        first = token(chart.render())
        self.assertEqual(len(base64.b64decode(first)), 48)
        self.assertNotEqual(token(chart.render()), first, "a fresh install's token is not random")
        existing = chart.one(chart.render(), "Secret")
        existing["data"]["token"] = first
        existing["metadata"]["namespace"] = "default"
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="tpserve-cluster-") as f:
            yaml.safe_dump(existing, f)
            f.flush()
            for extra in (["--upgrade", "--existing", f.name], ["--existing", f.name]):
                with self.subTest(extra=extra):
                    self.assertEqual(token(chart.render(extra=extra)), first)
            other = chart.render(namespace="elsewhere", extra=["--upgrade", "--existing", f.name])
            self.assertNotEqual(token(other), first, "a Secret of another namespace was read")

    def test_termination_drains_within_the_grace_period(self):
        objects = self.rendered["defaults"]
        values = chart.values()["coordinator"]
        timeout, sleep = values["shutdownTimeoutSeconds"], values["preStopSleepSeconds"]
        coordinator = chart.one(objects, "Deployment", "coordinator")
        spec = coordinator["spec"]["template"]["spec"]
        server = chart.container(coordinator, "coordinator")
        self.assertEqual(chart.flag(server["command"], "--shutdown-timeout"), str(timeout))
        self.assertEqual(server["lifecycle"]["preStop"]["exec"]["command"], ["sleep", str(sleep)])
        workers = chart.one(objects, "StatefulSet", "worker")["spec"]["template"]["spec"]
        for pod in (spec, workers):
            self.assertGreater(pod["terminationGracePeriodSeconds"], sleep + timeout)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="tpserve-values-") as f:
            yaml.safe_dump({"coordinator": {"preStopSleepSeconds": 0}}, f)
            f.flush()
            server = chart.container(chart.one(chart.render(f.name), "Deployment", "coordinator"),
                                     "coordinator")
        self.assertNotIn("lifecycle", server)

    def test_bad_values_fail_with_the_schema_message(self):
        for values, line in BAD_VALUES:
            with self.subTest(values=values):
                error = chart.render_failure(values)
                self.assertTrue(error.startswith("Error: " + chart.SCHEMA_ERROR + "\ntpserve:\n"),
                                error)
                self.assertIn(line + "\n", error)

    def test_notes_say_how_to_reach_the_api_and_run_tpctl(self):
        for name, (files, release) in VALUE_SETS.items():
            with self.subTest(values=name):
                notes = chart.render_notes(*files, release=release)
                service = next(s["metadata"]["name"] for s in
                               chart.find(self.rendered[name], "Service", "coordinator")
                               if s["spec"].get("clusterIP") != "None")
                coordinator = chart.one(self.rendered[name], "Deployment", "coordinator")
                self.assertIn(f"port-forward svc/{service} ", notes)
                self.assertIn(f"exec deploy/{coordinator['metadata']['name']} -- tpctl status",
                              notes)


class LeaderWorkerSetRenderTest(unittest.TestCase):
    """Mode lws: one LeaderWorkerSet of `replicas` groups, each a whole cluster: the leader pod
    runs the coordinator beside the first ranks, the other pods the rest; the clients' Service
    spreads over the leaders; a PodDisruptionBudget per group; peers reach each other."""

    @classmethod
    def setUpClass(cls):
        cls.values = chart.values(*LWS_VALUES)
        cls.objects = chart.render(*LWS_VALUES)
        cls.lws = chart.one(cls.objects, "LeaderWorkerSet")
        template = cls.lws["spec"]["leaderWorkerTemplate"]
        cls.leader = template["leaderTemplate"]
        cls.worker = template["workerTemplate"]

    def test_objects_validate_against_kubernetes_schemas(self):
        kinds = sorted(o["kind"] for o in self.objects)
        self.assertNotIn("StatefulSet", kinds)
        self.assertNotIn("Deployment", kinds)
        for o in self.objects:
            if o["kind"] in ("LeaderWorkerSet", "InferencePool"):  # CRDs: see test_scale_out
                continue
            with self.subTest(object=f"{o['kind']}/{o['metadata']['name']}"):
                kubernetes_validate.validate(o, KUBERNETES_VERSION, strict=True)
        # The LeaderWorkerSet's pod templates are Kubernetes pod templates.
        for name, template in (("leader", self.leader), ("worker", self.worker)):
            with self.subTest(template=name):
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
                     "template": template}, KUBERNETES_VERSION, strict=True)

    def test_groups(self):
        spec = self.lws["spec"]
        self.assertEqual(self.lws["apiVersion"], "leaderworkerset.x-k8s.io/v1")
        self.assertEqual(spec["replicas"], 2)
        # The coordinator turns ready once every rank registered: workers start with the leader.
        self.assertEqual(spec["startupPolicy"], "LeaderCreated")
        template = spec["leaderWorkerTemplate"]
        self.assertEqual(template["restartPolicy"], "None")
        self.assertEqual(self.lws["metadata"]["annotations"],
                         {"leaderworkerset.sigs.k8s.io/exclusive-topology":
                          "topology.kubernetes.io/zone"})
        ranks_per_pod = self.values["workers"]["gpusPerNode"]
        world = self.values["tensorParallelSize"]
        self.assertEqual(template["size"], world // ranks_per_pod)
        self.assertEqual([c["name"] for c in self.leader["spec"]["containers"]],
                         ["coordinator", "worker"])
        self.assertEqual([c["name"] for c in self.worker["spec"]["containers"]], ["worker"])
        coordinator = self.leader["spec"]["containers"][0]
        self.assertEqual(chart.flag(coordinator["command"], "--world-size"), str(world))
        grpc_port = chart.named_port(coordinator, "grpc")
        for pod in (self.leader, self.worker):
            worker = next(c for c in pod["spec"]["containers"] if c["name"] == "worker")
            env = {e["name"]: e.get("value") for e in worker["env"]}
            self.assertEqual(env["TPSERVE_CLUSTER_ADDRESS"], f"$(LWS_LEADER_ADDRESS):{grpc_port}")
            self.assertEqual(env["TPSERVE_POD_INDEX"], "$(LWS_WORKER_INDEX)")

    def test_each_group_starts_every_rank_once(self):
        workdir = fake_worker_dir(self)
        secret_values = pods.secrets(self.objects)
        grpc_port = chart.named_port(self.leader["spec"]["containers"][0], "grpc")
        size = self.lws["spec"]["leaderWorkerTemplate"]["size"]
        with pods.Processes() as processes:
            for group in range(self.lws["spec"]["replicas"]):
                leader = f"{self.lws['metadata']['name']}-{group}"
                ranks = []
                for index in range(size):
                    first_env = {"LWS_LEADER_ADDRESS": f"{leader}.{self.lws['metadata']['name']}",
                                 "LWS_WORKER_INDEX": str(index), "LWS_GROUP_SIZE": str(size)}
                    template = self.leader if index == 0 else self.worker
                    pod = WorkerPod(processes, None, index, workdir, secret_values,
                                    template["spec"], leader if index == 0 else
                                    f"{leader}-{index}", first_env)
                    for argv in pod.started().values():
                        self.assertEqual(chart.flag(argv, "--coordinator"),
                                         f"{first_env['LWS_LEADER_ADDRESS']}:{grpc_port}")
                        ranks.append(int(chart.flag(argv, "--rank")))
                    self.assertEqual(processes.terminate(pod.name), 0, processes.log(pod.name))
                self.assertEqual(sorted(ranks), list(range(self.values["tensorParallelSize"])))

    def test_services_budgets_and_policies(self):
        leader_labels = self.leader["metadata"]["labels"]
        worker_labels = self.worker["metadata"]["labels"]
        services = chart.find(self.objects, "Service")
        self.assertEqual(len(services), 1, "LeaderWorkerSet makes the groups' headless Service")
        self.assertTrue(chart.selects(services[0]["spec"]["selector"], leader_labels))
        self.assertFalse(chart.selects(services[0]["spec"]["selector"], worker_labels))
        budgets = chart.find(self.objects, "PodDisruptionBudget")
        self.assertEqual(len(budgets), self.lws["spec"]["replicas"])
        for group, budget in enumerate(budgets):
            labels = budget["spec"]["selector"]["matchLabels"]
            self.assertEqual(labels["leaderworkerset.sigs.k8s.io/name"],
                             self.lws["metadata"]["name"])
            self.assertEqual(labels["leaderworkerset.sigs.k8s.io/group-index"], str(group))
            self.assertEqual(budget["spec"]["maxUnavailable"], 1)
        # A leader runs ranks too: leader and worker pods reach each other on every port (Gloo
        # and NCCL listen where the kernel says).
        for target in (leader_labels, worker_labels):
            for source in (leader_labels, worker_labels):
                self.assertTrue(any(
                    chart.selects(p["spec"]["podSelector"]["matchLabels"], target) and any(
                        "ports" not in rule and any(
                            chart.selects(f["podSelector"]["matchLabels"], source)
                            for f in rule.get("from", []) if "podSelector" in f)
                        for rule in p["spec"]["ingress"])
                    for p in chart.find(self.objects, "NetworkPolicy")),
                    f"{source['app.kubernetes.io/component']} -> "
                    f"{target['app.kubernetes.io/component']}")

    def test_scale_out(self):
        """The autoscaler scales the LeaderWorkerSet on waiting requests from `replicas` up; the
        InferencePool spans the leaders' OpenAI port, whose coordinators export the names its
        endpoint picker reads."""
        hpa = chart.one(self.objects, "HorizontalPodAutoscaler")
        self.assertEqual(hpa["spec"]["scaleTargetRef"],
                         {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                          "name": self.lws["metadata"]["name"]})
        self.assertEqual(hpa["spec"]["minReplicas"], self.lws["spec"]["replicas"])
        self.assertEqual(hpa["spec"]["maxReplicas"], 6)
        (metric,) = hpa["spec"]["metrics"]
        self.assertEqual(metric["pods"]["metric"]["name"], "tpserve_num_requests_waiting")
        pool = chart.one(self.objects, "InferencePool")
        self.assertEqual(pool["apiVersion"], "inference.networking.k8s.io/v1")
        selector = pool["spec"]["selector"]["matchLabels"]
        self.assertTrue(chart.selects(selector, self.leader["metadata"]["labels"]))
        self.assertFalse(chart.selects(selector, self.worker["metadata"]["labels"]))
        coordinator = self.leader["spec"]["containers"][0]
        self.assertEqual(pool["spec"]["targetPorts"],
                         [{"number": chart.named_port(coordinator, "http")}])
        self.assertEqual(pool["spec"]["endpointPickerRef"]["name"], "tpserve-epp")
        self.assertEqual(chart.flag(coordinator["command"], "--metrics-names"), "vllm")

    def test_notes_say_how_to_run_tpctl_in_a_leader(self):
        notes = chart.render_notes(*LWS_VALUES)
        self.assertIn("in each of 2 LeaderWorkerSet group(s)", notes)
        self.assertIn(f"exec {self.lws['metadata']['name']}-0 -c coordinator -- tpctl status",
                      notes)


if __name__ == "__main__":
    chart.run_tests()

"""Rendered pods run as local processes, for the chart tests.

A container of a rendered pod becomes an argv and an environment that run here: what Kubernetes
would supply is replaced by its local equivalent, and nothing else is touched.
- the downward API: metadata.name -> the pod's name, status.podIP -> 127.0.0.1; HOSTNAME is the
  pod's name, as in a pod;
- volumes: every mount path in the command and the environment -> a local directory, one per
  volume, which the caller names for every volume the container mounts;
- PATH: the caller's directories (the image puts the binaries and scripts on PATH);
- what a controller puts first in the environment (LeaderWorkerSet's LWS_LEADER_ADDRESS,
  LWS_WORKER_INDEX, LWS_GROUP_SIZE): the caller's `first_env`;
- $(VAR) in an environment value: VAR's value where it is defined earlier, as the kubelet expands
  it.
Addresses and ports are the caller's to rewrite (helm_wiring_test maps them to free ports).

Processes start in their own session and die with the test (tpserve_cluster.die_with_parent).
"""

import base64
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import chart  # noqa: F401  (puts tests/integration on sys.path)
from tpserve_cluster import die_with_parent

_FIELDS = {"metadata.name": lambda pod: pod, "status.podIP": lambda pod: "127.0.0.1"}


def _map_paths(text, mounts):
    for mount_path, local in mounts.items():
        if text == mount_path or text.startswith(mount_path + "/"):
            return local + text[len(mount_path):]
    return text


def secrets(objects):
    """{(Secret name, key): value} of the rendered Secrets, decoded."""
    out = {}
    for o in objects:
        if o["kind"] == "Secret":
            for key, value in o.get("data", {}).items():
                out[(o["metadata"]["name"], key)] = base64.b64decode(value).decode()
    return out


def _expand(value, defined):
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: defined.get(m.group(1), m.group(0)), value)


def local_process(pod_spec, container_spec, pod_name, volume_dirs, path_dirs,
                  secret_values=None, first_env=None):
    """(argv, env) that run `container_spec` of a pod named `pod_name` here; environment
    variables from Secrets take their values from `secret_values` (see secrets()), and
    `first_env` comes before the container's own."""
    mounts = {}
    for mount in container_spec.get("volumeMounts", []):
        if mount["name"] not in volume_dirs:
            raise AssertionError(f"{pod_name}/{container_spec['name']} mounts volume "
                                 f"{mount['name']}, which has no local directory")
        mounts[mount["mountPath"]] = volume_dirs[mount["name"]]
    volumes = {v["name"] for v in pod_spec.get("volumes", [])}
    missing = {m["name"] for m in container_spec.get("volumeMounts", [])} - volumes
    if missing:
        raise AssertionError(f"{pod_name} mounts {missing}, which the pod does not define")
    env = {"PATH": os.pathsep.join(path_dirs + [os.defpath]), "HOSTNAME": pod_name}
    env.update(first_env or {})
    for entry in container_spec.get("env", []):
        if "value" in entry:
            env[entry["name"]] = _map_paths(_expand(entry["value"], env), mounts)
        elif "secretKeyRef" in entry["valueFrom"]:
            ref = entry["valueFrom"]["secretKeyRef"]
            if (ref["name"], ref["key"]) not in (secret_values or {}):
                raise AssertionError(f"{pod_name}: env {entry['name']} comes from Secret "
                                     f"{ref['name']} key {ref['key']}, which is not rendered")
            env[entry["name"]] = secret_values[(ref["name"], ref["key"])]
        else:
            field = entry["valueFrom"].get("fieldRef", {}).get("fieldPath")
            if field not in _FIELDS:
                raise AssertionError(f"{pod_name}: env {entry['name']} comes from "
                                     f"{entry['valueFrom']}, which has no local equivalent")
            env[entry["name"]] = _FIELDS[field](pod_name)
    argv = [_map_paths(a, mounts)
            for a in container_spec["command"] + container_spec.get("args", [])]
    return argv, env


def free_ports(count):
    """A first port p such that p .. p+count-1 are free on 127.0.0.1 now."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + count > 65536:
            continue
        held = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"found no {count} consecutive free ports")


class Processes:
    """Named local processes (one per container), each logging to a file of its own. Use as a
    context manager: on exit every process group still there gets SIGKILL."""

    def __init__(self):
        self.running = {}  # name -> (Popen, log path)
        self.log_dir = tempfile.TemporaryDirectory(prefix="tpserve-pods-")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for name in list(self.running):
            self.kill(name)
        self.log_dir.cleanup()
        return False

    def start(self, name, argv, env):
        log_path = os.path.join(self.log_dir.name, name + ".log")
        with open(log_path, "wb") as log:
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=die_with_parent)
        self.running[name] = (process, log_path)
        return process

    def log(self, name, lines=30):
        with open(self.running[name][1], encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def check_alive(self):
        for name, (process, _) in self.running.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with status {process.returncode}:\n"
                                     + self.log(name))

    def terminate(self, name, timeout=30):
        """SIGTERM to the process only, as the kubelet sends it to a container's first process;
        returns its exit status once it and every process of its group have ended."""
        process, _ = self.running[name]
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=timeout)
        deadline = time.monotonic() + timeout
        while group_alive(process.pid):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} exited but left processes in its group:\n"
                                     + self.log(name))
            time.sleep(0.1)
        return status

    def kill(self, name):
        process, _ = self.running.pop(name)
        if group_alive(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False

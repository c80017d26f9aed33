"""The tpserve Helm chart (helm/tpserve) as data, for the tests in this folder.

render() runs helm-render (tests/helm/render, built by CMake from Go's text/template and sprig:
`helm template` semantics, values checked against values.schema.json first) and returns the
rendered objects; the other functions find things in them. Test files end in run_tests(), which
takes --renderer besides tpserve_cluster's --bin-dir and --model.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import tpserve_cluster  # noqa: E402  (found through the line above)

CHART = os.path.join(REPO, "helm", "tpserve")
TEST_VALUES = os.path.join(REPO, "tests", "helm", "values")
SCHEMA_ERROR = "values don't meet the specifications of the schema(s) in the following chart(s):"


def run_tests():
    def add_arguments(parser):
        parser.add_argument("--renderer", required=True, help="the helm-render binary")
    tpserve_cluster.run_tests(add_arguments)


def args():
    return tpserve_cluster.parsed_args()


class RenderError(Exception):
    pass


def _render(value_files, release, namespace, extra):
    if not os.access(args().renderer, os.X_OK):
        raise RenderError(f"no helm-render at {args().renderer}: build it with "
                          "`cmake --build build --target tpserve_helm_test_deps`")
    command = [args().renderer, "--chart", CHART, "--release", release, "--namespace", namespace]
    for f in value_files:
        command += ["-f", f]
    return subprocess.run(command + extra, capture_output=True, text=True, timeout=60)


def render(*value_files, release="tpserve", namespace="default", extra=()):
    """The objects the chart renders with these values files (later ones win); `extra`:
    helm-render's --upgrade, --existing FILE."""
    result = _render(value_files, release, namespace, list(extra))
    if result.returncode != 0:
        raise RenderError(f"helm-render {' '.join(map(shlex.quote, value_files))} failed:\n"
                          + result.stderr)
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def render_notes(*value_files, release="tpserve", namespace="default"):
    result = _render(value_files, release, namespace, ["--notes"])
    if result.returncode != 0:
        raise RenderError(result.stderr)
    return result.stdout


def render_failure(values):
    """helm-render's error output for a values dict that must not render; RenderError if it
    renders."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="tpserve-values-") as f:
        yaml.safe_dump(values, f)
        f.flush()
        result = _render([f.name], "tpserve", "default", [])
    if result.returncode == 0:
        raise RenderError(f"values {values} rendered")
    return result.stderr


def values(*value_files):
    """The chart's values.yaml with these files merged over it (later ones win), as helm merges
    them: maps key by key, anything else replaced."""
    def merge(base, over):
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                merge(base[key], value)
            else:
                base[key] = value
        return base

    with open(os.path.join(CHART, "values.yaml")) as f:
        merged = yaml.safe_load(f)
    for path in value_files:
        with open(path) as f:
            merge(merged, yaml.safe_load(f) or {})
    return merged


def find(objects, kind, component=None):
    """The objects of a kind (and app.kubernetes.io/component label)."""
    return [o for o in objects if o["kind"] == kind and (
        component is None
        or o["metadata"]["labels"].get("app.kubernetes.io/component") == component)]


def one(objects, kind, component=None):
    found = find(objects, kind, component)
    if len(found) != 1:
        raise AssertionError(f"{len(found)} {kind} objects of component {component}, not 1")
    return found[0]


def container(workload, name):
    return next(c for c in workload["spec"]["template"]["spec"]["containers"]
                if c["name"] == name)


def flag(command, name):
    """The value after flag `name` in a container's command; KeyError when absent."""
    for i, arg in enumerate(command[:-1]):
        if arg == name:
            return command[i + 1]
    raise KeyError(f"{name} not in {command}")


def env_value(container_spec, name):
    return next(e["value"] for e in container_spec.get("env", []) if e["name"] == name)


def named_port(container_spec, name):
    return next(p["containerPort"] for p in container_spec["ports"] if p["name"] == name)


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def ranks_per_pod(worker_set):
    """The number of ranks the worker pod script starts, as the script itself states it."""
    script = container(worker_set, "worker")["command"][2]
    return int(re.search(r"^ranks_per_pod=(\d+)$", script, re.M).group(1))

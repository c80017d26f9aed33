"""helm_lint: real Helm (v4, from the pinned helm-sdkpy wheel that scripts/fetch-helm.sh fetches and
checks) lints the chart in every mode and value set the other chart tests render: for each, a copy
of the chart whose values.yaml is that set merged over the chart's, so that `helm lint` renders
every template with it and checks values.schema.json. Clean means no warning and no error; a
values set the schema refuses must fail the same lint.

    helm_lint_test.py --renderer BUILD/tests/helm/helm-render --bin-dir BUILD/bin --model M
"""

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import yaml

import chart

VALUE_SETS = {  # name: values files over the chart's values.yaml
    "defaults": [],
    "cpu-demo": [os.path.join(chart.CHART, "values-cpu-demo.yaml")],
    "llama3-70b-2x8": [os.path.join(chart.CHART, "values-llama3-70b-2x8.yaml")],
    "hostpath-monitoring": [os.path.join(chart.TEST_VALUES, "hostpath-monitoring.yaml")],
    "pvc-long-names": [os.path.join(chart.TEST_VALUES, "pvc-long-names.yaml")],
    "wiring": [os.path.join(chart.CHART, "values-cpu-demo.yaml"),
               os.path.join(chart.TEST_VALUES, "wiring.yaml")],
    "lws": [os.path.join(chart.CHART, "values-cpu-demo.yaml"),
            os.path.join(chart.TEST_VALUES, "wiring-lws.yaml")],
}
# helm's support.Severity.
SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


class Helm:
    """The few calls of libhelm_sdkpy that lint needs, through ctypes."""

    def __init__(self, library):
        self.lib = ctypes.CDLL(library)
        self.lib.helm_sdkpy_config_create.argtypes = [ctypes.c_char_p] * 4 + [
            ctypes.POINTER(ctypes.c_ulonglong)]
        self.lib.helm_sdkpy_lint.argtypes = [ctypes.c_ulonglong, ctypes.c_char_p,
                                             ctypes.POINTER(ctypes.c_void_p)]
        self.lib.helm_sdkpy_last_error.restype = ctypes.c_void_p
        self.lib.helm_sdkpy_version_string.restype = ctypes.c_void_p
        self.handle = ctypes.c_ulonglong()
        if self.lib.helm_sdkpy_config_create(b"default", b"", b"", b"{}",
                                             ctypes.byref(self.handle)) != 0:
            raise RuntimeError(f"helm config: {self.last_error()}")

    def last_error(self):
        error = self.lib.helm_sdkpy_last_error()
        return ctypes.string_at(error).decode() if error else ""

    def version(self):
        return ctypes.string_at(self.lib.helm_sdkpy_version_string()).decode()

    def lint(self, chart_dir):
        """[(severity name, path)] of every message of `helm lint chart_dir`."""
        out = ctypes.c_void_p()
        if self.lib.helm_sdkpy_lint(self.handle, chart_dir.encode(), ctypes.byref(out)) != 0:
            raise RuntimeError(f"helm lint {chart_dir}: {self.last_error()}")
        result = json.loads(ctypes.string_at(out.value).decode())
        return [(SEVERITY.get(m["Severity"], str(m["Severity"])), m["Path"])
                for m in result["Messages"] or []]


class HelmLintTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        fetch = os.path.join(chart.REPO, "scripts", "fetch-helm.sh")
        library = subprocess.run([fetch], check=True, capture_output=True, text=True,
                                 timeout=600).stdout.strip()
        cls.helm = Helm(library)
        print(f"real Helm: {cls.helm.version()}")

    def lint_with(self, values):
        with tempfile.TemporaryDirectory(prefix="tpserve-lint-") as tmp:
            copy = os.path.join(tmp, "tpserve")
            shutil.copytree(chart.CHART, copy)
            with open(os.path.join(copy, "values.yaml"), "w") as f:
                yaml.safe_dump(values, f)
            return self.helm.lint(copy)

    def test_every_mode_lints_clean(self):
        for name, files in VALUE_SETS.items():
            with self.subTest(values=name):
                messages = self.lint_with(chart.values(*files))
                problems = [m for m in messages if m[0] not in ("INFO",)]
                self.assertEqual(problems, [], f"helm lint with {name}: {messages}")

    def test_values_the_schema_refuses_fail_the_lint(self):
        values = chart.values(*VALUE_SETS["lws"])
        values["replicas"] = 0
        self.assertIn(("ERROR", "values.yaml"), self.lint_with(values))
        values = chart.values()
        values["replicas"] = 2  # a second cluster needs mode lws
        self.assertIn(("ERROR", "values.yaml"), self.lint_with(values))


if __name__ == "__main__":
    chart.run_tests()

"""scripts/gpu-check.sh's plan fits the device loan: `--dry-run` lists a time share for every GPU
test executable and for the benchmark and decode parts, and its shares add up to at most 420 s
(a device is lent for 15 minutes in all, its start and the transfers included). A budget the plan
does not fit is refused, so the script's own check can fail."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "gpu-check.sh")
BAR_S = 420  # issue 18: "gpu-check.sh --dry-run here plans <= 420 s in all"
LINE = re.compile(r"^(\S+)\s+(\d+) s$")
TOTAL = re.compile(r"^total\s+(\d+) s \(budget (\d+) s\)$")


def dry_run(budget=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    if budget is not None:
        env["GPU_CHECK_BUDGET_S"] = str(budget)
    # The script and tests/gpu's CMakeLists.txt in a tree of their own: a gpu-pkg left in the
    # checkout (whose MANIFEST the script would plan by) cannot change what is checked.
    with tempfile.TemporaryDirectory(prefix="tpserve-gpu-plan-") as root:
        os.makedirs(os.path.join(root, "scripts"))
        os.makedirs(os.path.join(root, "tests", "gpu"))
        shutil.copy(SCRIPT, os.path.join(root, "scripts"))
        shutil.copy(os.path.join(ROOT, "tests", "gpu", "CMakeLists.txt"),
                    os.path.join(root, "tests", "gpu"))
        return subprocess.run(["bash", os.path.join(root, "scripts", "gpu-check.sh"), "--dry-run"],
                              capture_output=True, text=True, env=env, cwd="/", timeout=60)


def gpu_test_executables():
    # One executable per tests/gpu/*_test.cc.
    return [os.path.basename(path)[:-len(".cc")]
            for path in glob.glob(os.path.join(ROOT, "tests", "gpu", "*_test.cc"))]


class GpuCheckPlan(unittest.TestCase):
    def test_the_plan_fits_420_seconds(self):
        out = dry_run()
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        parts, total = {}, None
        for line in out.stdout.splitlines():
            if m := TOTAL.match(line):
                total = int(m.group(1))
            elif m := LINE.match(line):
                self.assertNotIn(m.group(1), parts, "part listed twice")
                parts[m.group(1)] = int(m.group(2))
        print(out.stdout, end="")
        self.assertIsNotNone(total, "no total line in:\n" + out.stdout)
        self.assertEqual(sum(parts.values()), total)
        self.assertLessEqual(total, BAR_S)
        self.assertTrue(all(share > 0 for share in parts.values()), parts)
        wanted = gpu_test_executables() + ["tpserve-bench-cuda", "decode-smollm2",
                                           "mkmodel-llama3-8b", "decode-llama3-8b",
                                           "decode-llama3-8b-fp8"]
        self.assertGreaterEqual(len(wanted), 14)
        for name in wanted:
            self.assertIn(name, parts)

    def test_a_budget_the_plan_does_not_fit_is_refused(self):
        out = dry_run(budget=60)
        self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
        self.assertIn("the plan is over the budget", out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)

"""quickstart: the README's first command, `scripts/run.sh --once`, as a new user runs it.

It starts the local cluster (coordinator and three CPU workers) on the bundled model with the
default settings and answers "What is the capital of France?" through the launcher's own prompt
path (greedy). The terminal gets at most 6 lines, none of them a process's log line, and the
answer names Paris; the logs are in the file the first line names.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpserve_cluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = "What is the capital of France?"
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z [IWE] ")


class Quickstart(unittest.TestCase):
    def test_once_answers_paris_in_at_most_six_quiet_lines(self):
        with tempfile.TemporaryDirectory(prefix="tpserve-quickstart-") as tmp:
            log = os.path.join(tmp, "tpserve.log")
            # Only the port differs from the README's command: 8000 may be taken on a test host.
            run = subprocess.run(
                [os.path.join(ROOT, "scripts", "run.sh"), "--once", PROMPT, "--http-port", "0",
                 "--log-file", log],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                preexec_fn=tpserve_cluster.die_with_parent)
            print(run.stdout)
            self.assertEqual(run.returncode, 0, run.stdout)
            lines = run.stdout.splitlines()
            self.assertLessEqual(len(lines), 6, run.stdout)
            self.assertFalse([l for l in lines if LOG_LINE.match(l)], run.stdout)
            self.assertRegex(lines[0], r"^tpserve: gRPC at \S+; HTTP at \S+; admin at \S+; "
                                       r"logs in " + re.escape(log) + "$")
            loaded = re.match(r"^tpserve: loaded (\S+) on 3 cpu workers: ([\d.]+) MB "
                              r"\(100%\) in [\d.]+ s; serving$", lines[1])
            self.assertIsNotNone(loaded, lines[1])
            # The bytes are the file's tensors: all of it but the header (metadata, vocabulary).
            file_mb = os.path.getsize(os.path.join(ROOT, loaded.group(1))) / 1e6
            self.assertGreater(float(loaded.group(2)), 0.9 * file_mb)
            self.assertLessEqual(float(loaded.group(2)), file_mb)
            asked = lines.index("> " + PROMPT)
            self.assertIn("Paris", lines[asked + 1])
            self.assertEqual(lines[-1], "tpserve: stopped")
            with open(log, encoding="utf-8") as f:
                logs = f.read()
            # Every process logged there: the coordinator, each worker, the launcher; and the
            # workers say which CPU path auto chose.
            for marker in ["I coordinator] serving: 3 ranks", "I worker] rank 2/3: loaded",
                           "I tpserve] coordinator listening",
                           "CPU weights packed-a16 (auto)"]:
                self.assertIn(marker, logs)


if __name__ == "__main__":
    unittest.main(verbosity=2)

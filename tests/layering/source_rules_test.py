"""Rules on the sources themselves: no file over 600 lines in coordinator/ and worker/ (their
subfolders included), where a request's hops and a rank's step live; and the engine's tests wait
on events, never on sleeps (the engine's clock is injected, its stats awaited).

    source_rules_test.py --root REPO
"""

import glob
import os
import re
import sys
import unittest

import source_tree

LIMIT = 600
FOLDERS = ("coordinator", "worker")
SUFFIXES = (".cc", ".h", ".cu", ".cuh", ".py")
ENGINE_TESTS = "tests/unit/coordinator/engine*"
SLEEP = re.compile(r"sleep_for|sleep_until|SleepFor|usleep|nanosleep|\bsleep\(")
ROOT = None


def sizes():
    """(path, lines) of every source file under FOLDERS."""
    for folder in FOLDERS:
        for directory, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                if name.endswith(SUFFIXES):
                    path = os.path.join(directory, name)
                    with open(path, encoding="utf-8") as f:
                        yield os.path.relpath(path, ROOT), sum(1 for _ in f)


class SourceRules(unittest.TestCase):
    def test_no_file_over_the_limit(self):
        counted = dict(sizes())
        self.assertGreater(len(counted), 100, "the folders' files were not found")
        over = {path: lines for path, lines in counted.items() if lines > LIMIT}
        self.assertEqual(over, {}, f"files over {LIMIT} lines")

    def test_engine_tests_do_not_sleep(self):
        files = glob.glob(os.path.join(ROOT, ENGINE_TESTS))
        self.assertGreater(len(files), 2, "the engine's tests were not found")
        for path in files:
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    self.assertIsNone(SLEEP.search(line), f"{path}:{number}: {line.strip()}")


if __name__ == "__main__":
    source_tree.run_tests(sys.modules[__name__])

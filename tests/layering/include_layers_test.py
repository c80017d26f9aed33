"""The layers' includes: what each file reaches through the project's own headers ("..." includes,
followed transitively from the repository root or the generated proto folder's names).

The scheduler plans in ids and blocks: it must not reach the wire protos (the engine converts a
step once each way, coordinator/step_wire.h), nor text (detokenization and stop strings are the
engine's OutputProcessor's).

    include_layers_test.py --root REPO
"""

import os
import re
import sys
import unittest

import source_tree

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# Files that must not reach a header, with why.
RULES = [
    ("coordinator/scheduler.cc", "tpserve/v1/", "the scheduler works in ids and blocks, not protos"),
    ("coordinator/scheduler.h", "tpserve/v1/", "the scheduler works in ids and blocks, not protos"),
    ("coordinator/scheduled_batch.h", "tpserve/v1/", "a step's plan is converted in step_wire.h"),
    ("coordinator/sequence.h", "tpserve/v1/", "a sequence is the coordinator's, not the wire's"),
    ("coordinator/scheduler.cc", "model/detokenizer.h", "text is the OutputProcessor's"),
    ("coordinator/scheduler.cc", "coordinator/stop_strings.h", "text is the OutputProcessor's"),
]
ROOT = None


def reached(path):
    """Every "..." include reachable from `path`, with the chain that reaches it."""
    seen, chains, stack = set(), {}, [(path, [path])]
    while stack:
        current, chain = stack.pop()
        full = os.path.join(ROOT, current)
        if not os.path.exists(full):
            continue  # generated (protos) or a dependency's: a leaf
        with open(full, encoding="utf-8") as f:
            for name in INCLUDE.findall(f.read()):
                if name in seen:
                    continue
                seen.add(name)
                chains[name] = chain + [name]
                stack.append((name, chain + [name]))
    return chains


class IncludeLayers(unittest.TestCase):
    def test_rules(self):
        for source, forbidden, why in RULES:
            with self.subTest(source=source):
                self.assertTrue(os.path.exists(os.path.join(ROOT, source)), source)
                bad = {n: c for n, c in reached(source).items() if n.startswith(forbidden)}
                self.assertEqual(bad, {}, f"{source} reaches {forbidden}: {why}")


if __name__ == "__main__":
    source_tree.run_tests(sys.modules[__name__])

"""What the layering tests share: the repository's root from --root, then unittest's run."""

import argparse
import sys
import unittest


def run_tests(module):
    """Sets `module.ROOT` from --root and runs the tests of `module` (the caller's __main__)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parsed, rest = parser.parse_known_args()
    module.ROOT = parsed.root
    unittest.main(module=module, argv=[sys.argv[0]] + rest, verbosity=2)

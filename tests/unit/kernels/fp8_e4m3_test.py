"""kernels/cpu/fp8_e4m3.h against ml_dtypes.float8_e4m3fn, an independent implementation.

Every one of the 256 codes decodes to ml_dtypes' value (NaN for 0x7F and 0xFF). Values spread over
every binade from below the smallest subnormal to past the largest finite, every exact code and
every midpoint between neighbours (ties go to the even code), negatives, zeros, infinities and
NaN encode as ml_dtypes encodes them after saturating to +-448 (what CUDA's satfinite does).

    fp8_e4m3_test.py --tool BUILD/bin/fp8_e4m3_tool
"""

import argparse
import subprocess
import sys
import unittest

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn
MAX = 448.0
TOOL = None


def run_tool(values):
    """(codes, table): the tool's ToE4m3 of `values` and FromE4m3 of every code."""
    out = subprocess.run([TOOL], input=values.astype("<f4").tobytes(), capture_output=True,
                         check=True).stdout
    codes = np.frombuffer(out[:len(values)], dtype=np.uint8)
    table = np.frombuffer(out[len(values):], dtype="<f4")
    assert len(table) == 256, len(out)
    return codes, table


def test_values():
    exact = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
    finite = np.unique(exact[np.isfinite(exact)])
    midpoints = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    rng = np.random.default_rng(7)
    spread = rng.choice([-1.0, 1.0], 200_000) * np.exp2(rng.uniform(-14, 10, 200_000))
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, MAX, -MAX, 449.0, 463.9, 464.0, 465.0,
               480.0, 1e6, -1e30, 2.0 ** -9, 2.0 ** -10, 2.0 ** -10 * 1.0001, 2.0 ** -11,
               2.0 ** -6, 2.0 ** -6 * (1 - 2.0 ** -20), 1e-30, -1e-45]
    values = np.concatenate([finite, midpoints, -midpoints, spread, special])
    return values.astype(np.float32)


class E4m3AgainstMlDtypes(unittest.TestCase):
    def test_every_code_decodes_as_ml_dtypes(self):
        _, table = run_tool(np.zeros(0, dtype=np.float32))
        expected = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
        np.testing.assert_array_equal(np.isnan(table), np.isnan(expected))
        finite = ~np.isnan(expected)
        np.testing.assert_array_equal(table[finite], expected[finite])
        self.assertEqual(int(np.isnan(table).sum()), 2)
        self.assertEqual(float(np.nanmax(table)), MAX)
        self.assertEqual(float(table[1]), 2.0 ** -9)  # the smallest subnormal

    def test_rounding_saturation_and_subnormals_as_ml_dtypes(self):
        values = test_values()
        codes, _ = run_tool(values)
        saturated = np.where(np.isnan(values), values, np.clip(values, -MAX, MAX))
        expected = saturated.astype(E4M3).view(np.uint8)
        nan = np.isnan(values)
        self.assertTrue(np.all(np.isin(codes[nan], [0x7F, 0xFF])))
        mismatched = np.nonzero(codes[~nan] != expected[~nan])[0]
        self.assertEqual(len(mismatched), 0,
                         [(float(values[~nan][i]), int(codes[~nan][i]), int(expected[~nan][i]))
                          for i in mismatched[:10]])
        # The cases the text names are in there: subnormals, ties and saturation.
        self.assertGreater(int(np.sum((np.abs(values) < 2.0 ** -6) & (codes % 128 != 0))), 1000)
        self.assertEqual(int(codes[values == 1e6][0]), 0x7E)
        self.assertEqual(int(codes[values == -1e30][0]), 0xFE)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--tool", required=True)
    args, rest = parser.parse_known_args()
    TOOL = args.tool
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

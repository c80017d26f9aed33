"""kernels/cpu/fp8_matmul.h against ml_dtypes and NumPy, written here from the definition.

Per-row scales are max|row| / 448 in float32; codes are ml_dtypes.float8_e4m3fn of
row * (1 / scale) (every value lies within +-448, so no saturation is involved); the product is
the float64 sum of decoded codes times both scales. Codes and scales must be equal; the products
within 1e-5 relative to the largest (the tool sums in float32). And as a sanity bound on the
format: FP8 W8A8 stays within 6% (Frobenius, relative) of the float64 product of the unquantized
inputs. E4M3 keeps 3 mantissa bits: rounding one factor has a relative RMS error of about 0.027
(2^-4 at most), so a product of two about 0.038, and a sum of k such terms of random signs the
same relative to its own size; a wrong scale or a misplaced code is off by 100% or more.

    fp8_matmul_test.py --tool BUILD/bin/fp8_matmul_tool
"""

import argparse
import subprocess
import sys
import unittest

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn
TOOL = None


def run_tool(a, b):
    m, k = a.shape
    n = b.shape[0]
    header = np.array([m, n, k], dtype="<i8").tobytes()
    out = subprocess.run([TOOL], input=header + a.astype("<f4").tobytes() + b.astype("<f4").tobytes(),
                         capture_output=True, check=True).stdout
    sizes = [m * k, 4 * m, n * k, 4 * n, 4 * m * n]
    assert len(out) == sum(sizes), (len(out), sizes)
    parts, offset = [], 0
    for size in sizes:
        parts.append(out[offset:offset + size])
        offset += size
    a_codes = np.frombuffer(parts[0], np.uint8).reshape(m, k)
    a_scales = np.frombuffer(parts[1], "<f4")
    b_codes = np.frombuffer(parts[2], np.uint8).reshape(n, k)
    b_scales = np.frombuffer(parts[3], "<f4")
    c = np.frombuffer(parts[4], "<f4").reshape(m, n)
    return a_codes, a_scales, b_codes, b_scales, c


def quantize_rows(x):
    amax = np.abs(x).max(axis=1).astype(np.float32)
    scales = np.where(amax > 0, amax / np.float32(448.0), np.float32(1.0)).astype(np.float32)
    inverse = (np.float32(1.0) / scales).astype(np.float32)
    codes = (x * inverse[:, None]).astype(np.float32).astype(E4M3).view(np.uint8)
    return codes, scales


class Fp8MatmulAgainstNumpy(unittest.TestCase):
    def check(self, a, b):
        a = a.astype(np.float32)
        b = b.astype(np.float32)
        a_codes, a_scales, b_codes, b_scales, c = run_tool(a, b)
        want_a_codes, want_a_scales = quantize_rows(a)
        want_b_codes, want_b_scales = quantize_rows(b)
        np.testing.assert_array_equal(a_scales, want_a_scales)
        np.testing.assert_array_equal(b_scales, want_b_scales)
        np.testing.assert_array_equal(a_codes, want_a_codes)
        np.testing.assert_array_equal(b_codes, want_b_codes)
        decoded_a = want_a_codes.view(E4M3).astype(np.float64) * want_a_scales[:, None]
        decoded_b = want_b_codes.view(E4M3).astype(np.float64) * want_b_scales[:, None]
        want = decoded_a @ decoded_b.T
        scale = max(np.abs(want).max(), 1e-30)
        self.assertLess(np.abs(c - want).max() / scale, 1e-5)
        exact = a.astype(np.float64) @ b.astype(np.float64).T
        if np.abs(exact).max() > 0:
            self.assertLess(np.linalg.norm(want - exact) / np.linalg.norm(exact), 0.06)
        return a_codes, b_codes

    def test_random_activations_and_weights(self):
        rng = np.random.default_rng(3)
        for m, n, k in [(1, 96, 256), (7, 33, 64), (16, 64, 1000)]:
            a = rng.standard_normal((m, k)) * rng.uniform(0.01, 30, (m, 1))  # per-token ranges
            b = rng.standard_normal((n, k)) * rng.uniform(1e-3, 0.1, (n, 1))  # per-channel ranges
            self.check(a, b)

    def test_outliers_zero_rows_and_subnormal_codes(self):
        rng = np.random.default_rng(4)
        a = rng.standard_normal((4, 128))
        a[0, 5] = 500.0          # one outlier sets the row's scale
        a[0, 6] = 0.005          # 0.0045 in code units: a subnormal code
        a[1] = 0.0               # an all-zero row: scale 1, codes 0
        a[2] = 1e-3 * a[2]
        b = rng.standard_normal((8, 128))
        b[3] = 0.0
        a_codes, b_codes = self.check(a, b)
        self.assertTrue(np.all(a_codes[1] == 0) and np.all(b_codes[3] == 0))
        self.assertEqual(a_codes[0, 5], 0x7E)  # the row maximum is 448 exactly
        self.assertEqual(a_codes[0, 6], 2)  # 0.0045 / 2^-9 = 2.3: the subnormal code 2


def main():
    global TOOL
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    args, rest = parser.parse_known_args()
    TOOL = args.tool
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()

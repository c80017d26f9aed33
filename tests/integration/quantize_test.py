"""tpserve-quantize against NumPy: the bundled Q4_1 model rewritten at F32 and at Q4_1 again.

gguf_reader decodes each file from ggml's published block formats:
- at F32, every matrix holds exactly the original's decoded values (Q4_1 and Q8_0 decode with one
  rounding, so NumPy's float64 result rounded to fp32 is the value), vectors are copied byte for
  byte, the metadata is the original's but for general.file_type (0, all F32);
- that F32 file written back at Q4_1 decodes within half a quantization step of each value per
  32-element block (plus the fp16 rounding of the block's minimum), file_type 3.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import F32, Q4_1, Gguf  # noqa: E402

ARGS = None


class Quantize(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        tool = os.path.join(ARGS.bin_dir, "tpserve-quantize")
        cls.f32_path = os.path.join(cls.tmp.name, "f32.gguf")
        cls.q41_path = os.path.join(cls.tmp.name, "q41.gguf")
        for source, target, kind in ((ARGS.model, cls.f32_path, "f32"),
                                     (cls.f32_path, cls.q41_path, "q4_1")):
            subprocess.run([tool, source, target, "--type", kind], check=True,
                           stderr=subprocess.DEVNULL)
        cls.original = Gguf(ARGS.model)
        cls.f32 = Gguf(cls.f32_path)
        cls.q41 = Gguf(cls.q41_path)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_f32_holds_the_decoded_values(self):
        matrices = 0
        for name, values in self.original.tensors.items():
            written = self.f32.tensors[name]
            self.assertEqual(written.shape, values.shape, name)
            if values.ndim == 2:
                matrices += 1
                self.assertEqual(self.f32.types[name], F32, name)
                np.testing.assert_array_equal(written, values.astype(np.float32), err_msg=name)
            else:
                self.assertEqual(self.f32.types[name], self.original.types[name], name)
                np.testing.assert_array_equal(written, values, err_msg=name)
        self.assertGreater(matrices, 200)
        self.assertEqual(self.f32.metadata.pop("general.file_type"), 0)
        original = dict(self.original.metadata)
        original.pop("general.file_type", None)
        self.assertEqual(self.f32.metadata, original)

    def test_q4_1_within_half_a_step(self):
        self.assertEqual(self.q41.metadata["general.file_type"], 3)
        for name, values in self.f32.tensors.items():
            decoded = self.q41.tensors[name]
            if values.ndim != 2:
                np.testing.assert_array_equal(decoded, values, err_msg=name)
                continue
            self.assertEqual(self.q41.types[name], Q4_1, name)
            blocks = values.reshape(-1, 32)
            low, high = blocks.min(axis=1, keepdims=True), blocks.max(axis=1, keepdims=True)
            step = (high - low) / 15
            # Half a step for the code, the fp16 rounding of d (times up to 15 codes) and of m.
            bound = step / 2 + 15 * np.abs(step) * 2.0 ** -11 + np.abs(low) * 2.0 ** -11 + 1e-7
            error = np.abs(decoded.reshape(-1, 32) - blocks)
            over = error - bound
            self.assertTrue(np.all(over <= 0), "%s: %g past the bound" % (name, over.max()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)

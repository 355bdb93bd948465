"""Tests of tensor_file.py (magi-tensors-v1). Runs under PyTorch 1.13 and 2.x:

    python3 benchmarks/pytorch/tensor_file_test.py
"""

import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import tensor_file  # noqa: E402
from tensor_file import TensorFileError  # noqa: E402


class TensorFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tensor_file_test.", dir=os.environ.get("TEST_TMPDIR"))
        self.prefix = os.path.join(self.dir, "t")

    def write_raw(self, index, data):
        with open(self.prefix + ".json", "w") as f:
            json.dump(index, f)
        with open(self.prefix + ".bin", "wb") as f:
            f.write(data)

    def assertReadFails(self, *fragments):
        with self.assertRaises(TensorFileError) as ctx:
            tensor_file.read_tensors(self.prefix)
        for fragment in fragments:
            self.assertIn(fragment, str(ctx.exception))
        self.assertIn(self.prefix + ".json", str(ctx.exception))

    def test_round_trip_every_dtype_in_order(self):
        g = torch.Generator().manual_seed(0)
        tensors = [
            ("z.float32", torch.randn(3, 5, generator=g)),
            ("a.bfloat16", torch.randn(7, generator=g).to(torch.bfloat16)),
            ("m.float16", torch.randn(2, 2, 2, generator=g).to(torch.float16)),
            ("step.0.tokens", torch.randint(-2**40, 2**40, (4, 9), generator=g)),
            ("i32", torch.randint(-2**31, 2**31 - 1, (5,), generator=g, dtype=torch.int64).to(torch.int32)),
            ("scalar", torch.tensor(3.5)),
            ("empty", torch.zeros(0, 4)),
            ("transposed", torch.arange(12.0).view(3, 4).t()),  # non-contiguous input
        ]
        index = tensor_file.write_tensors(self.prefix, tensors)
        got = tensor_file.read_tensors(self.prefix)
        self.assertEqual(list(got), [n for n, _ in tensors])
        for name, expected in tensors:
            self.assertEqual(got[name].dtype, expected.dtype, name)
            self.assertEqual(list(got[name].shape), list(expected.shape), name)
            self.assertTrue(torch.equal(got[name], expected), name)  # bitwise, bfloat16 included
            self.assertEqual(got[name].device.type, "cpu")
        for entry in index["tensors"]:
            self.assertEqual(entry["offset"] % tensor_file.ALIGNMENT, 0, entry)
        self.assertEqual(sorted(os.listdir(self.dir)), ["t.bin", "t.json"])  # no temporary files left
        with open(self.prefix + ".json") as f:
            self.assertEqual(json.load(f), index)

    def test_reads_a_hand_written_file(self):
        # Layout pinned independently of the writer: little-endian, C order, offsets as given.
        data = b"\xff" * 3 + struct.pack("<4f", 1.0, -2.0, 0.5, 8.0) + struct.pack("<2q", -1, 2**40)
        data += struct.pack("<2H", 0x3F80, 0xC040)  # bfloat16 1.0, -3.0
        self.write_raw({"format": "magi-tensors-v1", "tensors": [
            {"name": "w", "dtype": "float32", "shape": [2, 2], "offset": 3, "nbytes": 16},
            {"name": "ids", "dtype": "int64", "shape": [2], "offset": 19, "nbytes": 16},
            {"name": "h", "dtype": "bfloat16", "shape": [2], "offset": 35, "nbytes": 4},
        ]}, data)
        got = tensor_file.read_tensors(self.prefix)
        self.assertTrue(torch.equal(got["w"], torch.tensor([[1.0, -2.0], [0.5, 8.0]])))
        self.assertTrue(torch.equal(got["ids"], torch.tensor([-1, 2**40])))
        self.assertTrue(torch.equal(got["h"], torch.tensor([1.0, -3.0], dtype=torch.bfloat16)))
        only = tensor_file.read_tensors(self.prefix + ".json", names=["h", "w"])
        self.assertEqual(list(only), ["w", "h"])

    def test_writer_bytes_are_little_endian_c_order(self):
        tensor_file.write_tensors(self.prefix, {"x": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)})
        with open(self.prefix + ".bin", "rb") as f:
            self.assertEqual(f.read(), struct.pack("<4i", 1, 2, 3, 4))

    def test_bad_format_tag(self):
        self.write_raw({"format": "magi-tensors-v2", "tensors": []}, b"")
        self.assertReadFails("format is 'magi-tensors-v2'", "magi-tensors-v1")

    def test_offset_beyond_the_file(self):
        self.write_raw({"format": "magi-tensors-v1", "tensors": [
            {"name": "w", "dtype": "float32", "shape": [4], "offset": 8, "nbytes": 16}]}, b"\0" * 20)
        self.assertReadFails("tensor 'w'", "bytes [8, 24) lie beyond the end", "(20 bytes)")

    def test_nbytes_disagrees_with_shape(self):
        self.write_raw({"format": "magi-tensors-v1", "tensors": [
            {"name": "w", "dtype": "bfloat16", "shape": [2, 3], "offset": 0, "nbytes": 24}]}, b"\0" * 24)
        self.assertReadFails("tensor 'w'", "nbytes is 24 but bfloat16[2, 3] needs 12")

    def test_unknown_dtype_missing_field_bad_shape(self):
        cases = [
            ({"name": "w", "dtype": "complex64", "shape": [1], "offset": 0, "nbytes": 8}, "unknown dtype 'complex64'"),
            ({"name": "w", "dtype": "float32", "shape": [1], "offset": 0}, "missing \"nbytes\""),
            ({"name": "w", "dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 4}, "shape must be"),
            ({"name": "w", "dtype": "float32", "shape": [1], "offset": -4, "nbytes": 4}, "offset must be"),
            ({"name": "", "dtype": "float32", "shape": [1], "offset": 0, "nbytes": 4}, "\"name\" must be"),
        ]
        for entry, message in cases:
            self.write_raw({"format": "magi-tensors-v1", "tensors": [entry]}, b"\0" * 16)
            self.assertReadFails(message)

    def test_duplicate_and_overlapping_tensors(self):
        a = {"name": "a", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}
        self.write_raw({"format": "magi-tensors-v1", "tensors": [a, dict(a)]}, b"\0" * 16)
        self.assertReadFails("tensor 'a' appears twice")
        b = {"name": "b", "dtype": "float32", "shape": [2], "offset": 4, "nbytes": 8}
        self.write_raw({"format": "magi-tensors-v1", "tensors": [a, b]}, b"\0" * 16)
        self.assertReadFails("tensor 'b' overlaps tensor 'a'")

    def test_missing_files_and_bad_json(self):
        self.assertReadFails("cannot read")
        with open(self.prefix + ".json", "w") as f:
            f.write("{not json")
        with open(self.prefix + ".bin", "wb"):
            pass
        self.assertReadFails("not valid JSON")
        os.unlink(self.prefix + ".bin")
        with open(self.prefix + ".json", "w") as f:
            json.dump({"format": "magi-tensors-v1", "tensors": []}, f)
        self.assertReadFails("cannot read the data file", self.prefix + ".bin")

    def test_read_of_unknown_name(self):
        tensor_file.write_tensors(self.prefix, {"a": torch.ones(1)})
        with self.assertRaises(TensorFileError) as ctx:
            tensor_file.read_tensors(self.prefix, names=["a", "nope"])
        self.assertIn("no tensor named 'nope'", str(ctx.exception))

    def test_writer_rejects_bad_input_and_keeps_the_old_file(self):
        tensor_file.write_tensors(self.prefix, {"a": torch.ones(2)})
        for tensors, message in [
            ({"x": torch.ones(2, dtype=torch.complex64)}, "tensor 'x' has dtype torch.complex64"),
            ([("x", torch.ones(1)), ("x", torch.ones(1))], "tensor 'x' appears twice"),
            ({"x": [1.0]}, "tensor 'x' is a list"),
        ]:
            with self.assertRaises(TensorFileError) as ctx:
                tensor_file.write_tensors(self.prefix, tensors)
            self.assertIn(message, str(ctx.exception))
        self.assertTrue(torch.equal(tensor_file.read_tensors(self.prefix)["a"], torch.ones(2)))
        self.assertEqual(sorted(os.listdir(self.dir)), ["t.bin", "t.json"])


if __name__ == "__main__":
    unittest.main()

"""Tests of tools/compare_step_tables.py on small tables written here."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "compare_step_tables.py")

BASE = """# mean_seconds,count,[working_bytes=N,]key
0.001,20,aten::mm(f32[8,64], f32[64,64]) -> f32[8,64]
0.002,10,working_bytes=4096,aten::relu(f32[8,64]) -> f32[8,64]
0.003,20,magi::all_gather_start[world=2](f32[32]) -> future<f32[64]>
0.5,10,aten::only_in_base(f32[1]) -> f32[1]
"""
OTHER = """0.0012,20,aten::mm(f32[8,64], f32[64,64]) -> f32[8,64]
0.002,10,aten::relu(f32[8,64]) -> f32[8,64]
0.004,10,magi::all_gather_start[world=2, overlapped](f32[32], f32[32]) -> future<f32[64]> future<f32[64]>
"""


class CompareStepTablesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_tool(self, *args):
        result = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
        return result.returncode, result.stdout, result.stderr

    def test_compute_at_the_other_tables_counts_and_each_collective_per_step(self):
        code, out, err = self.run_tool(self.write("a.csv", BASE), self.write("b.csv", OTHER), "--steps=10")
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "compute keys in both: 2 (only in base: 1, only in other: 0)")
        # other's counts: mm 2/step, relu 1/step. Base: 2 + 2 = 4 ms; other: 2.4 + 2 = 4.4 ms.
        self.assertEqual(lines[1], "compute per step at other's counts: base's times 4.000 ms, other's 4.400 ms "
                                   "(other/base 1.100)")
        self.assertIn("base collective 3.000 ms x 2.00/step  magi::all_gather_start[world=2](f32[32])", out)
        self.assertIn("base collectives per step 6.000 ms", out)
        self.assertIn("other collectives per step 4.000 ms", out)

    def test_keys_in_one_table_only_are_counted_and_no_shared_compute_is_not_a_ratio(self):
        other = "0.001,10,aten::relu(f32[4]) -> f32[4]\n0.002,10,aten::only_in_other(f32[4]) -> f32[4]\n"
        code, out, err = self.run_tool(self.write("a.csv", "0.003,10,aten::sum(f32[4]) -> f32[]\n"),
                                       self.write("b.csv", other), "--steps=10")
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "compute keys in both: 0 (only in base: 1, only in other: 2)")
        self.assertEqual(lines[1], "compute per step at other's counts: base's times 0.000 ms, other's 0.000 ms "
                                   "(other/base nan)")

    def test_a_malformed_line_names_the_file_and_line(self):
        code, _, err = self.run_tool(self.write("a.csv", BASE), self.write("bad.csv", "0.1,x,aten::mm()\n"),
                                     "--steps=1")
        self.assertEqual(code, 1)
        self.assertIn("bad.csv:1: mean_seconds or count is not a number", err)

    def test_a_missing_file_is_a_clear_error(self):
        code, _, err = self.run_tool(self.write("a.csv", BASE), os.path.join(self.dir, "none.csv"), "--steps=1")
        self.assertEqual(code, 1)
        self.assertIn("none.csv", err)


if __name__ == "__main__":
    unittest.main()

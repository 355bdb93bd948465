#!/usr/bin/env python3
"""tools/fx_opinfo.py's bookkeeping: every exported case ends with a verdict. fx_run is replaced by a
script with fx_run's output contract ("PASS|WRONG|ERROR <file>: <detail>" lines) that misbehaves the
ways a real run can: an AddressSanitizer report (exit 1 before the verdict), a signal, a clean batch."""

import os
import stat
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tools import fx_opinfo  # noqa: E402

# Prints PASS for every file up to the first one whose name says how to fail, then fails that way.
_FAKE_FX_RUN = r"""#!/bin/sh
shift  # --runs=2
for f in "$@"; do
  case "$f" in
    *asan*) echo "==42==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1" >&2; exit 1 ;;
    *segv*) kill -SEGV $$ ;;
    *wrong*) echo "WRONG $f: output.0 differs by 1" ;;
    *) echo "PASS $f: 2 outputs" ;;
  esac
done
"""


class RunAllTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.fx_run = os.path.join(self.dir, "fx_run")
        with open(self.fx_run, "w") as f:
            f.write(_FAKE_FX_RUN)
        os.chmod(self.fx_run, stat.S_IRWXU)

    def cases(self, *names):
        return [{"case": n, "mode": "forward", "status": "exported", "file": os.path.join(self.dir, n)}
                for n in names]

    def test_an_early_exit_without_a_verdict_is_wrong_and_the_rest_of_the_batch_still_runs(self):
        cases = self.cases("a_ok", "b_asan", "c_ok", "d_wrong")
        fx_opinfo.run_all(cases, self.fx_run)
        status = {c["case"]: c["status"] for c in cases}
        self.assertEqual(status, {"a_ok": "pass", "b_asan": "wrong", "c_ok": "pass", "d_wrong": "wrong"})
        reason = cases[1]["reason"]
        self.assertIn("exited with status 1 without a verdict", reason)
        self.assertIn("AddressSanitizer", reason)

    def test_a_crash_names_the_signal(self):
        cases = self.cases("a_ok", "b_segv")
        fx_opinfo.run_all(cases, self.fx_run)
        self.assertEqual(cases[0]["status"], "pass")
        self.assertEqual(cases[1]["status"], "wrong")
        self.assertIn("killed by signal 11", cases[1]["reason"])

    def test_cases_that_were_not_exported_are_left_alone(self):
        cases = self.cases("a_ok") + [{"case": "x", "mode": "joint", "status": "skipped", "reason": "r"}]
        fx_opinfo.run_all(cases, self.fx_run)
        self.assertEqual([c["status"] for c in cases], ["pass", "skipped"])


if __name__ == "__main__":
    unittest.main()

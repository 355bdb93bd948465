"""Tests of tools/doc_tables.py on a scratch repository: a current table passes; a changed number,
a table without a block, a missing raw file, bad render arguments, unbalanced markers and too
many legacy tables fail with the doc and line named; `write` repairs a stale table."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "doc_tables.py")

ROWS = [
    {"label": "Magi", "ms": 90.0, "mean_ms": 91.0, "tokens": 8192, "peak_gib": 19.6, "host_ms": 0.1,
     "predicted_ms": 84.0, "losses": [5.0, 4.0]},
    {"label": "PyTorch FSDP2 eager", "ms": 131.0, "mean_ms": 135.0, "tokens": 8192, "peak_gib": 25.0,
     "host_ms": None, "predicted_ms": None, "losses": [5.0, 4.001]},
]
SOURCE = ("tools/doc_tables.py render fsdp-1b docs/benchmarks/run.json --columns=run,ms,tokens_s,loss_diff "
          "'--label=Magi=Magi (now)'")
TABLE = """| run | ms/step (median) | tokens/s | max loss diff vs first |
|---|---|---|---|
| Magi (now) | 90.0 | 91,022 | 0.00e+00 |
| PyTorch FSDP2 eager | 131.0 | 62,534 | 1.00e-03 |
"""


class DocTablesTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.makedirs(os.path.join(self.root, "docs", "benchmarks"))
        with open(os.path.join(self.root, "docs", "benchmarks", "run.json"), "w") as f:
            json.dump(ROWS, f)

    def tearDown(self):
        shutil.rmtree(self.root)

    def doc(self, text, name="docs/a.md"):
        with open(os.path.join(self.root, name), "w") as f:
            f.write(text)

    def run_tool(self, *args):
        result = subprocess.run([sys.executable, TOOL, *args, "--root", self.root, "docs/*.md"],
                                capture_output=True, text=True)
        return result.returncode, result.stdout + result.stderr

    def block(self, table, source=SOURCE, indent=""):
        lines = [indent + "<!-- table run: %s -->" % source] + [indent + l for l in table.splitlines()]
        return "Intro.\n\n" + "\n".join(lines) + "\n" + indent + "<!-- end table run -->\n\nAfter.\n"

    def test_current_table_passes(self):
        self.doc(self.block(TABLE))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)
        self.assertIn("1 render; 0 problem(s)", out)

    def test_indented_table_passes(self):
        self.doc(self.block(TABLE, indent="  "))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)

    def test_changed_number_fails_and_write_repairs(self):
        self.doc(self.block(TABLE.replace("90.0", "89.0")))
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("docs/a.md:3: table run is not what its raw output renders to", out)
        code, out = self.run_tool("write")
        self.assertEqual(code, 0, out)
        with open(os.path.join(self.root, "docs", "a.md")) as f:
            self.assertEqual(f.read(), self.block(TABLE))

    def test_table_outside_a_block_fails(self):
        self.doc("Intro.\n\n" + TABLE + "\nAfter.\n")
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("docs/a.md:4: a table outside any", out)

    def test_missing_raw_file_fails(self):
        self.doc(self.block(TABLE, SOURCE.replace("run.json", "gone.json")))
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("no such file: docs/benchmarks/gone.json", out)

    def test_bad_render_arguments_fail(self):
        self.doc(self.block(TABLE, SOURCE.replace("tokens_s", "tokens")))
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("unknown column(s) tokens", out)
        self.doc(self.block(TABLE, "tools/doc_tables.py render nosuch x"))
        code, out = self.run_tool("check")
        self.assertIn("bad render arguments", out)

    def test_unbalanced_quotes_in_a_source_fail_clearly(self):
        self.doc(self.block(TABLE, SOURCE + " 'open"))
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("docs/a.md:3: table run: its source does not split into words: No closing quotation", out)

    def test_unbalanced_markers_fail(self):
        self.doc("<!-- table run: reference -->\n| a |\n|---|\n")
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("block run never ends", out)

    def test_command_must_be_a_file(self):
        self.doc(self.block(TABLE, "tools/nosuch.sh --quick"))
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("'tools/nosuch.sh' is no file of the repository", out)

    def test_reference_and_legacy_are_counted(self):
        self.doc(self.block(TABLE, "reference") + self.block(TABLE, "legacy: not kept").replace("run", "old"))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)
        self.assertIn("1 legacy, 1 reference", out)

    def summary(self, path, **fields):
        summary = {"initial_loss": 5.0, "final_loss": 3.0, "tokens_per_s": 1000.0, "step_seconds": 0.040,
                   "predicted_step_seconds": 0.035, "eager_max_relative_loss_difference": None}
        summary.update(fields)
        os.makedirs(os.path.dirname(os.path.join(self.root, path)), exist_ok=True)
        with open(os.path.join(self.root, path), "w") as f:
            json.dump(summary, f)

    def test_summaries_render_each_run_and_say_what_was_not_checked(self):
        self.summary("docs/benchmarks/a.json", eager_max_relative_loss_difference=1.04e-7)
        self.summary("docs/benchmarks/b.json")
        self.summary("docs/benchmarks/c.json", eager_max_relative_loss_difference="nan")
        table = ("| run | loss, first -> last | largest relative loss difference to eager | ms/step |\n"
                 "|---|---|---|---|\n| a run | 5.0000 -> 3.0000 | 1.0e-07 | 40.0 |\n"
                 "| b | 5.0000 -> 3.0000 | - | 40.0 |\n| c | 5.0000 -> 3.0000 | nan | 40.0 |\n")
        source = ("tools/doc_tables.py render summaries --columns=loss,eager,ms '--row=a run=docs/benchmarks/a.json' "
                  "--row=b=docs/benchmarks/b.json --row=c=docs/benchmarks/c.json")
        self.doc(self.block(table, source))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)

    def test_gemm_workspace_columns_compare_plan_plus_predicted_workspaces_with_the_peak(self):
        self.summary("docs/benchmarks/a.json", predicted_peak_memory_bytes=60_000_000, peak_memory_bytes=128_000_000,
                     predicted_library_device_bytes=67_108_864, library_device_bytes=67_108_864, memory_budget_bytes=60_000_000)
        self.summary("docs/benchmarks/old.json")  # an older summary: neither number
        # Summaries written before the budget had one name call it budget_bytes.
        self.summary("docs/benchmarks/renamed.json", budget_bytes=70_000_000)
        table = ("| run | memory budget | GEMM workspaces predicted | GEMM workspaces held "
                 "| plan + predicted workspaces vs measured peak |\n"
                 "|---|---|---|---|---|\n| a | 0.06 GB | 67.109 MB | 67.109 MB | -0.70% |\n| old | none | - | - | - |\n"
                 "| renamed | 0.07 GB | - | - | - |\n")
        source = ("tools/doc_tables.py render summaries --columns=budget,library_predicted,library_bytes,peak_with_library_error "
                  "--row=a=docs/benchmarks/a.json --row=old=docs/benchmarks/old.json "
                  "--row=renamed=docs/benchmarks/renamed.json")
        self.doc(self.block(table, source))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)

    def test_prediction_errors_count_the_runs_within_ten_percent(self):
        self.summary("docs/benchmarks/rep/run1/x.json")  # -12.5%
        self.summary("docs/benchmarks/rep/run2/x.json", step_seconds=0.036)  # -2.8%
        self.summary("docs/benchmarks/rep/run10/x.json", step_seconds=0.035)  # exact
        table = ("| run | run1 | run2 | run10 | within 10% | measured means (around their median) |\n"
                 "|---|---|---|---|---|---|\n"
                 "| x | -12.5% (35.0 / 40.0 ms) | -2.8% (35.0 / 36.0 ms) | +0.0% (35.0 / 35.0 ms) | 2 of 3 "
                 "| 35.0-40.0 ms (-3% / +11%) |\n")
        self.doc(self.block(table, "tools/doc_tables.py render prediction-errors --name=x --runs=docs/benchmarks/rep"))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)

    def test_a_command_block_is_run_and_compared(self):
        script = os.path.join(self.root, "docs", "print_table.py")
        with open(script, "w") as f:
            f.write("import sys\nprint('noise first')\nprint('| a |')\nprint('|---|')\nprint('| ' + sys.argv[1] + ' |')\n")
        self.doc(self.block("| a |\n|---|\n| 1 |\n", "docs/print_table.py OLD"))
        code, out = self.run_tool("check", "--run=run", "--replace=OLD=1")
        self.assertEqual(code, 0, out)
        code, out = self.run_tool("check", "--run=run", "--replace=OLD=2")
        self.assertEqual(code, 1)
        self.assertIn("table run is not what its command prints", out)
        code, out = self.run_tool("check", "--run=nosuch")
        self.assertIn("--run nosuch: no such table", out)

    def test_log_rows_take_each_match_of_a_printed_line(self):
        with open(os.path.join(self.root, "docs", "benchmarks", "t.log"), "w") as f:
            f.write("[ RUN ] A\npeak 10 B (plain 12)\n[ OK ] A\nnoise\npeak 7 B (plain 9)\n[ OK ] B\n")
        source = ("tools/doc_tables.py render log-rows docs/benchmarks/t.log "
                  "'--regex=^peak (?P<peak>\\d+) B \\(plain (?P<plain>\\d+)\\)\\n\\[ OK \\] (?P<test>\\S+)' "
                  "--first=case --label=one --label=two --column=test=test '--column=peak (B)=peak' --column=plain=plain")
        table = "| case | test | peak (B) | plain |\n|---|---|---|---|\n| one | A | 10 | 12 |\n| two | B | 7 | 9 |\n"
        self.doc(self.block(table, source))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)
        self.doc(self.block(table, source.replace("--label=two ", "")))
        code, out = self.run_tool("check")
        self.assertIn("2 row(s) of --regex matches for 1 --label(s)", out)

    def test_log_rows_merge_the_ranks_lines_of_a_section(self):
        with open(os.path.join(self.root, "docs", "benchmarks", "t.log"), "w") as f:
            f.write("[ RUN ] T.One\nrank 1: within 2e-07 (3 tensors)\nrank 0: within 1.5e-07 (3 tensors)\n"
                    "[ RUN ] T.Two\nrank 0: within 0 (4 tensors)\n")
        source = ("tools/doc_tables.py render log-rows docs/benchmarks/t.log "
                  "'--regex=^rank \\d+: within (?P<worst>\\S+) \\((?P<n>\\d+) tensors\\)' "
                  "'--section=^\\[ RUN \\] T\\.(?P<test>\\S+)' --group=test --max=worst --format=worst=%.1e "
                  "--label=one --label=two --column=test=test --column=worst=worst --column=tensors=n")
        table = "|  | test | worst | tensors |\n|---|---|---|---|\n| one | One | 2.0e-07 | 3 |\n| two | Two | 0.0e+00 | 4 |\n"
        self.doc(self.block(table, source))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)
        # Columns that are not --max must agree across the merged lines.
        self.doc(self.block(table, source.replace("--max=worst ", "")))
        code, out = self.run_tool("check")
        self.assertIn("give it as --max?", out)
        # --key: labels name their rows, in the labels' order; a row without a label fails.
        keyed = source.replace("--label=one --label=two", "--key=test --label=two=Two --label=one=One")
        swapped = "|  | test | worst | tensors |\n|---|---|---|---|\n| two | Two | 0.0e+00 | 4 |\n| one | One | 2.0e-07 | 3 |\n"
        self.doc(self.block(swapped, keyed))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)
        self.doc(self.block(swapped, keyed.replace(" --label=one=One", "")))
        code, out = self.run_tool("check")
        self.assertIn("rows with test 'One' have no --label", out)

    def test_history_names_a_commit_of_the_repository(self):
        table = "| a |\n|---|\n| 1 |\n"
        self.doc(self.block(table, "history: run of some day"))
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("a history source is `history: COMMIT (YYYY-MM-DD ...): WHY`", out)
        git = ["git", "-C", self.root, "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(git + ["init", "-q"], check=True)
        subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "m"], check=True)
        head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        self.doc(self.block(table, "history: %s (2026-12-01, before raw outputs were kept): results not kept" % head))
        code, out = self.run_tool("check")
        self.assertEqual(code, 0, out)
        self.assertIn("1 history", out)
        other = "0000000" if head != "0000000" else "1111111"
        self.doc(self.block(table, "history: %s (2026-12-01): results not kept" % other))
        code, out = self.run_tool("check")
        self.assertIn("history names commit %s, which this repository does not have" % other, out)

    def test_too_many_legacy_tables_fail(self):
        import importlib.util
        spec = importlib.util.spec_from_file_location("doc_tables", TOOL)
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        text = "".join(self.block("| a |\n|---|\n", "legacy: x").replace("table run", "table t%d" % i)
                       for i in range(tool.LEGACY_LIMIT + 1))
        self.doc(text)
        code, out = self.run_tool("check")
        self.assertEqual(code, 1)
        self.assertIn("legacy and history tables, more than LEGACY_LIMIT", out)


if __name__ == "__main__":
    unittest.main()

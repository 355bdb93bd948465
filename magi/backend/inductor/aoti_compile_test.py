"""aoti_compile.py's job handling without PyTorch: a stand-in `torch` module records what the
compile step asks of it, so the deterministic-mode settings (issue 17) are checked here; the
real compiles run where AOTInductor exists (LibTorch 2.11+, //magi/backend/inductor tests)."""
import fcntl
import importlib.util
import os
import threading
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def _fake_torch(calls):
    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+cu130"
    torch.use_deterministic_algorithms = lambda on, warn_only=False: calls.append(("deterministic", on, warn_only))
    inductor = types.ModuleType("torch._inductor")
    config = types.ModuleType("torch._inductor.config")
    config.max_autotune = True  # this torch's config has these and no `deterministic`
    config.coordinate_descent_tuning = True
    config.combo_kernels = False
    config.triton = types.SimpleNamespace(max_tiles=2)

    def aoti_compile_and_package(program, package_path, inductor_configs):
        calls.append(("compile", dict(inductor_configs)))
        with open(package_path, "w") as f:
            f.write("package")

    inductor.aoti_compile_and_package = aoti_compile_and_package
    inductor.config = config
    torch._inductor = inductor
    export = types.ModuleType("torch.export")
    export.export = lambda module, inputs: "exported"
    torch.export = export
    return {"torch": torch, "torch._inductor": inductor, "torch._inductor.config": config, "torch.export": export}


def _load_script():
    spec = importlib.util.spec_from_file_location("aoti_compile", os.path.join(HERE, "aoti_compile.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class GraphModule:
    class graph:  # noqa: N801 - what the script reads of a torch.fx graph
        nodes = []


class AotiCompileJobTest(unittest.TestCase):
    def run_job(self, deterministic, extra="", expect=("ok\n", 0)):
        calls = []
        saved = {name: sys.modules.get(name) for name in _fake_torch(calls)}
        sys.modules.update(_fake_torch(calls))
        try:
            script = _load_script()
            with tempfile.TemporaryDirectory() as d:
                program = os.path.join(d, "p.py")
                with open(program, "w") as f:
                    f.write("from aoti_compile_test import GraphModule\nGRAPH = 'g'\nINPUTS = []\n"
                            "def build():\n    return GraphModule()\n")
                job = os.path.join(d, "job")
                with open(job, "w") as f:
                    f.write("magi-aoti-job\t1\ntorch\t2.11.0\nworker\t1/1\n" +
                            ("deterministic\t1\n" if deterministic else "") + extra +
                            "task\t%s\t%s\t%s\t@g\n" % (program, os.path.join(d, "p.pt2"), os.path.join(d, "r")))
                os.environ.pop("MAGI_AOTI_LOG", None)
                sys.path.insert(0, HERE)
                self.assertEqual(script._run_job(job), expect[1])
                with open(os.path.join(d, "r")) as f:
                    self.assertEqual(f.readline(), expect[0])
                    calls.append(("result", f.read()))
        finally:
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
        return calls

    def test_deterministic_job_compiles_with_deterministic_settings(self):
        calls = self.run_job(deterministic=True)
        self.assertEqual(calls[0], ("deterministic", True, True))
        compile_configs = calls[1][1]
        self.assertEqual(compile_configs["max_autotune"], False)
        self.assertEqual(compile_configs["coordinate_descent_tuning"], False)
        self.assertNotIn("deterministic", compile_configs)  # this torch's config has no such key
        self.assertEqual(compile_configs["aot_inductor.metadata"], {"magi.graph": "g"})

    def test_default_job_changes_nothing(self):
        calls = self.run_job(deterministic=False)
        self.assertEqual(calls[:-1], [("compile", {"aot_inductor.metadata": {"magi.graph": "g"}})])

    def test_precompile_headers_off(self):
        calls = self.run_job(deterministic=False, extra="precompile_headers\t0\n")
        self.assertEqual(calls[:-1], [("compile", {"aot_inductor.metadata": {"magi.graph": "g"},
                                                   "aot_inductor.precompile_headers": False})])

    def test_inductor_settings_reach_every_package(self):
        calls = self.run_job(deterministic=False, extra="config\tcombo_kernels\ttrue\nconfig\ttriton.max_tiles\t3\n")
        self.assertEqual(calls[:-1], [("compile", {"aot_inductor.metadata": {"magi.graph": "g"},
                                                   "combo_kernels": True, "triton.max_tiles": 3})])

    def test_a_setting_this_torch_lacks_fails_every_task_without_compiling(self):
        calls = self.run_job(deterministic=False, extra="config\tcombo_kernel\ttrue\n", expect=("error\n", 1))
        self.assertEqual(calls, [("result", "Inductor (torch 2.11.0+cu130) has no setting 'combo_kernel' "
                                            "(config.combo_kernel=true)\n")])

    def test_inductor_settings_are_checked_against_this_torch(self):
        script = _load_script()
        config = types.SimpleNamespace(combo_kernels=False, max_autotune=False, cpp_wrapper_name="x", ratio=0.5,
                                       optional=None, triton=types.SimpleNamespace(max_tiles=2), patterns=[1])
        self.assertEqual(script.user_configs(config, [("ratio", "1"), ("cpp_wrapper_name", "12"),
                                                      ("optional", "false")], False, "2.11.0"),
                         {"ratio": 1, "cpp_wrapper_name": "12", "optional": False})
        with self.assertRaisesRegex(ValueError, r"torch 2.11.0\) has no setting 'combo_kernel' "
                                                r"\(config.combo_kernel=true\)"):
            script.user_configs(config, [("combo_kernel", "true")], False, "2.11.0")
        with self.assertRaisesRegex(ValueError, "has no setting 'triton.max_tile'"):
            script.user_configs(config, [("triton.max_tile", "3")], False, "2.11.0")
        with self.assertRaisesRegex(ValueError, r"'combo_kernels' is a bool \(now False\), got config.combo_kernels=1"):
            script.user_configs(config, [("combo_kernels", "1")], False, "2.11.0")
        with self.assertRaisesRegex(ValueError, "'patterns' is a list, which a config.NAME option cannot set"):
            script.user_configs(config, [("patterns", "1")], False, "2.11.0")
        with self.assertRaisesRegex(ValueError, "contradicts deterministic mode, which sets max_autotune=False"):
            script.user_configs(config, [("max_autotune", "true")], True, "2.11.0")
        self.assertEqual(script.user_configs(config, [("max_autotune", "false")], True, "2.11.0"),
                         {"max_autotune": False})

    def run_tasks(self, d, names, locked=()):
        """Runs one job of tasks `names` in directory `d` twice (two workers of one compile),
        with the packages in `locked` held by another "process" for 0.3 s; returns the
        compile calls in order (by package path)."""
        calls = []
        saved = {name: sys.modules.get(name) for name in _fake_torch(calls)}
        fake = _fake_torch(calls)
        compile_and_package = fake["torch._inductor"].aoti_compile_and_package

        def recording(program, package_path, inductor_configs):
            calls.append(("package", os.path.basename(package_path)))
            compile_and_package(program, package_path, inductor_configs)

        fake["torch._inductor"].aoti_compile_and_package = recording
        sys.modules.update(fake)
        holders = []
        try:
            script = _load_script()
            program = os.path.join(d, "p.py")
            with open(program, "w") as f:
                f.write("from aoti_compile_test import GraphModule\nGRAPH = 'g'\nINPUTS = []\n"
                        "def build():\n    return GraphModule()\n")
            job = os.path.join(d, "job")
            with open(job, "w") as f:
                f.write("magi-aoti-job\t1\ntorch\t2.11.0\nworker\t1/2\n")
                for name in names:
                    f.write("task\t%s\t%s\t%s\t@%s\n" % (program, os.path.join(d, name + ".pt2"),
                                                          os.path.join(d, name + ".result"), name))
            for name in locked:
                holder = open(os.path.join(d, name + ".pt2.lock"), "w")
                fcntl.flock(holder, fcntl.LOCK_EX)
                holders.append(holder)
            threading.Timer(0.3, lambda: [h.close() for h in holders]).start()
            os.environ.pop("MAGI_AOTI_LOG", None)
            sys.path.insert(0, HERE)
            self.assertEqual(script._run_job(job), 0)
            self.assertEqual(script._run_job(job), 0)  # the second worker: everything is claimed
            for name in names:
                with open(os.path.join(d, name + ".result")) as f:
                    self.assertEqual(f.readline(), "ok\n")
        finally:
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
        return [c[1] for c in calls if c[0] == "package"]

    def test_each_task_is_compiled_once_by_the_workers_of_a_compile(self):
        with tempfile.TemporaryDirectory() as d:
            compiled = self.run_tasks(d, ["a", "b", "c"])
        self.assertEqual(len(compiled), 3)  # not 6: the second worker found every task claimed
        self.assertTrue(all(name.startswith(".") and name.endswith(".tmp.pt2") for name in compiled), compiled)

    def test_a_package_another_process_is_making_is_taken_up_last(self):
        with tempfile.TemporaryDirectory() as d:
            compiled = self.run_tasks(d, ["a", "b"], locked=["a"])
        self.assertEqual([name.split(".")[1] for name in compiled], ["b", "a"])

    def test_cuda_partitions_skip_the_cpu_vector_isa_check(self):
        script = _load_script()
        cuda = ("x", None, [2], [1], "cuda:0")
        cpu = ("y", None, [2], [1], "cpu")
        self.assertEqual(script.device_configs([cuda, cuda]), {"cpp.vec_isa_ok": False})
        self.assertEqual(script.device_configs([cuda, cpu]), {})  # CPU kernels: Inductor picks the ISA
        self.assertEqual(script.device_configs([cpu]), {})
        self.assertEqual(script.device_configs([]), {})

    def test_deterministic_configs_takes_what_the_config_has(self):
        script = _load_script()
        config = types.SimpleNamespace(deterministic=False, max_autotune=True, max_autotune_gemm=True)
        self.assertEqual(script.deterministic_configs(config),
                         {"deterministic": True, "max_autotune": False, "max_autotune_gemm": False})


if __name__ == "__main__":
    unittest.main()

"""The compile step of Magi's inductor backend: FX programs -> AOTInductor packages.

The C++ backend (magi/backend/inductor) embeds this file, writes it into its cache folder and
runs it with the configured Python (whose torch must be the LibTorch the process runs on):

    python3 aoti_compile.py --probe               # prints key=value lines: torch version, AOTInductor, CUDA devices
    python3 aoti_compile.py JOB                   # compiles the tasks listed in the file JOB

JOB is a text file of tab-separated lines: first "magi-aoti-job 1", then "torch", VERSION;
"worker", "I/N"; optionally "deterministic", "1" (deterministic mode, docs/deterministic.md: ATen's
deterministic algorithms on while Inductor lowers, so it emits no atomic-add reductions, and no
autotuning or benchmark-driven choices); optionally "precompile_headers", "0" (AOTInductor compiles
each package's C++ wrapper without its shared precompiled header: no process waits for the one that
makes it); optionally lines "config", NAME, VALUE (Inductor settings for every package: the
backend's config.NAME options; see user_configs); and one line per task: "task", the program (.py written by fx_program.cc),
the package to write (.pt2), the result file to write, and a label for progress lines.
Every worker of one compile gets the same task list, largest first, and takes the next task
nobody has claimed yet (a claim is the file RESULT.claim, created exclusively): the partitions
are spread over the workers as they finish, so one worker never ends up with two large
partitions while another idles (round robin did that: the cold compile is the longest worker's
time, not the mean). Each
program's build() gives a torch.fx.GraphModule of torch.ops.aten calls; it is exported with
torch.export.export on example inputs of the declared dtypes, sizes, strides and devices, and
compiled with torch._inductor.aoti_compile_and_package. Nothing is half-written: the package
goes to a temporary name in the same folder and is renamed; the result file likewise. A lock
file per package makes concurrent compiles of the same partition (several ranks, several
processes) wait for one another instead of repeating the work; a worker first does the tasks
nobody else is making and comes back to the locked ones last.

Result files hold "ok", the export and compile seconds and the op count, one per line; or
"error" and the message. With MAGI_AOTI_PROFILE=DIR, each task's export and compile run under
cProfile, and DIR gets LABEL.PID.prof and LABEL.PID.txt (the 60 costliest functions by
cumulative time): where a cold compile's minutes go, per partition and per process. Progress lines go to the original stderr; everything else the
compile prints (Inductor, the C++ compiler) goes to stdout/stderr as redirected by the caller.
"""

import fcntl
import importlib.util
import os
import sys
import time
import traceback


def _probe():
    import torch

    lines = ["torch=%s" % torch.__version__,
             "torch_dir=%s" % os.path.dirname(os.path.abspath(torch.__file__)),
             "python=%s" % sys.executable]
    has_inductor = importlib.util.find_spec("torch._inductor") is not None
    has_export = importlib.util.find_spec("torch.export") is not None
    lines.append("aoti=%d" % int(has_inductor and has_export))
    cuda = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            cuda.append("sm_%d%d" % (major, minor))
    lines.append("cuda=%s" % ",".join(cuda))
    print("\n".join(lines))


def _write_atomically(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _example(entry, torch):
    """An example input of the declared dtype, sizes and strides (strides may overlap: an
    expanded tensor has stride 0), viewed from a storage of its own. Values only shape
    tracing; they are deterministic so that a compile is reproducible."""
    _, dtype, sizes, strides, device = entry
    storage = 1 + sum((n - 1) * s for n, s in zip(sizes, strides)) if all(n > 0 for n in sizes) else 0
    if dtype.is_floating_point:
        base = torch.linspace(-1, 1, steps=max(storage, 1), dtype=torch.float64)[:storage].to(dtype)
    else:
        base = torch.zeros(storage, dtype=dtype)
    return base.to(device).as_strided(sizes, strides)


def deterministic_configs(config):
    """The Inductor settings of deterministic mode that this torch has (names vary by version)."""
    wanted = {"deterministic": True, "max_autotune": False, "max_autotune_gemm": False,
              "max_autotune_pointwise": False, "coordinate_descent_tuning": False}
    return {name: value for name, value in wanted.items() if hasattr(config, name)}


def _config_value(text):
    """A config.NAME option's value as Python: true/false, an integer, a decimal, else the word."""
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def user_configs(config, pairs, deterministic, version):
    """The Inductor settings a job asks for (NAME, VALUE text pairs), checked against this
    torch's `config` module: a NAME it lacks, a value of another type than the setting's
    (an integer may set a decimal one), or in deterministic mode a value other than the one
    deterministic mode sets, is a ValueError naming it: a misspelt setting must not pass
    silently as a package compiled without it."""
    wanted = deterministic_configs(config) if deterministic else {}
    settings = {}
    for name, text in pairs:
        current = config
        for part in name.split("."):
            if not hasattr(current, part):
                raise ValueError("Inductor (torch %s) has no setting %r (config.%s=%s)" % (version, name, name, text))
            current = getattr(current, part)
        if current is not None and not isinstance(current, (bool, int, float, str)):
            raise ValueError("Inductor setting %r is a %s, which a config.NAME option cannot set (config.%s=%s)"
                             % (name, type(current).__name__, name, text))
        value = text if isinstance(current, str) else _config_value(text)
        if not (current is None or type(value) is type(current) or (type(current) is float and type(value) is int)):
            raise ValueError("Inductor setting %r is a %s (now %r), got config.%s=%s"
                             % (name, type(current).__name__, current, name, text))
        if name in wanted and wanted[name] != value:
            raise ValueError("config.%s=%s contradicts deterministic mode, which sets %s=%r"
                             % (name, text, name, wanted[name]))
        settings[name] = value
    return settings


def device_configs(inputs):
    """Inductor settings that follow from where a partition runs (INPUTS entries: name, dtype,
    sizes, strides, device). A partition whose inputs are all on CUDA runs its kernels on the
    GPU: its C++ is the host wrapper (and at most scalar code for CPU scalars), which needs no
    CPU vectorization (the flag drops only that, never correctness), so Inductor's check of which ISA the
    compiler can build (a g++ dry compile of vectorized ATen code per ISA, under a file lock
    every compiling process waits on) is skipped: 52 of a first partition's 92 s in a cold
    8-process compile of the 953M step on the GPU machine (MAGI_AOTI_PROFILE)."""
    if inputs and all(str(entry[4]).startswith("cuda") for entry in inputs):
        return {"cpp.vec_isa_ok": False}
    return {}


def _compile(torch, program_path, package_path, deterministic=False, precompile_headers=True, settings=None):
    spec = importlib.util.spec_from_file_location("magi_partition", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    graph_module = module.build()
    ops = sum(1 for n in graph_module.graph.nodes if n.op == "call_function" and str(n.target).startswith("aten."))
    inputs = tuple(_example(entry, torch) for entry in module.INPUTS)
    start = time.time()
    program = torch.export.export(graph_module, inputs)
    exported = time.time()
    directory, name = os.path.split(package_path)
    tmp = os.path.join(directory, ".%s.%d.tmp.pt2" % (name[: -len(".pt2")], os.getpid()))
    configs = {"aot_inductor.metadata": {"magi.graph": str(module.GRAPH)}}
    if deterministic:
        import torch._inductor.config as inductor_config
        configs.update(deterministic_configs(inductor_config))
    if not precompile_headers:
        configs["aot_inductor.precompile_headers"] = False
    configs.update(device_configs(module.INPUTS))
    configs.update(settings or {})
    torch._inductor.aoti_compile_and_package(program, package_path=tmp, inductor_configs=configs)
    os.replace(tmp, package_path)
    done = time.time()
    return ops, exported - start, done - exported


def _profiled(label, function, *args):
    """function(*args), under cProfile when MAGI_AOTI_PROFILE names a folder (see above)."""
    folder = os.environ.get("MAGI_AOTI_PROFILE")
    if not folder:
        return function(*args)
    import cProfile
    import io
    import pstats
    profile = cProfile.Profile()
    try:
        return profile.runcall(function, *args)
    finally:
        # A profile that cannot be written is reported, never the compile's failure.
        try:
            os.makedirs(folder, exist_ok=True)
            stem = os.path.join(folder, "%s.%d" % ("".join(c if c.isalnum() or c in "-_." else "_" for c in label),
                                                  os.getpid()))
            profile.dump_stats(stem + ".prof")
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(60)
            _write_atomically(stem + ".txt", text.getvalue())
        except Exception as e:  # noqa: BLE001
            sys.stderr.write("magi: inductor: %s: MAGI_AOTI_PROFILE: profile not written: %s\n" % (label, e))


def _compile_task(torch, task, deterministic, precompile_headers, settings, worker, progress, blocking):
    """Compiles one claimed task under its package's lock. Returns None when not blocking
    and another process holds the lock (it is making the same package), else whether the
    compile failed."""
    program, package, result, label = task
    with open(package + ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        try:
            if os.path.exists(package):
                _write_atomically(result, "ok\n0\n0\n0\ncached by another process\n")
                progress.write("magi: inductor: %s: compiled meanwhile by another process\n" % label)
                progress.flush()
                return False
            ops, export_s, compile_s = _profiled(label, _compile, torch, program, package, deterministic,
                                                 precompile_headers, settings)
            _write_atomically(result, "ok\n%.3f\n%.3f\n%d\n" % (export_s, compile_s, ops))
            progress.write("magi: inductor: %s: %d aten ops compiled in %.1f s (export %.1f s) [worker %s]\n"
                           % (label, ops, export_s + compile_s, export_s, worker))
        except Exception as e:  # noqa: BLE001 - every failure is reported for its partition
            traceback.print_exc()
            detail = ("%s: %s" % (type(e).__name__, e)).strip().replace("\r", "")
            if len(detail) > 2000:
                detail = detail[:1000] + " ... " + detail[-1000:]
            _write_atomically(result, "error\n%s\n" % detail)
            progress.write("magi: inductor: %s: AOTInductor failed: %s\n" % (label, detail.splitlines()[0][:300]))
            progress.flush()
            return True
        progress.flush()
    return False


def _run_job(job_path):
    with open(job_path) as f:
        lines = [line.rstrip("\n") for line in f]
    if not lines or lines[0] != "magi-aoti-job\t1":
        sys.exit("aoti_compile.py: %s is not a job file" % job_path)
    expected_torch, worker, tasks, deterministic, precompile_headers = None, "1/1", [], False, True
    config_pairs = []
    for line in lines[1:]:
        fields = line.split("\t")
        if fields[0] == "torch":
            expected_torch = fields[1]
        elif fields[0] == "worker":
            worker = fields[1]
        elif fields[0] == "deterministic":
            deterministic = fields[1] == "1"
        elif fields[0] == "precompile_headers":
            precompile_headers = fields[1] != "0"
        elif fields[0] == "config":
            config_pairs.append((fields[1], fields[2]))
        elif fields[0] == "task":
            tasks.append(fields[1:5])
    # Progress lines go to the caller's stderr; the compile's own output to the log.
    progress = os.fdopen(os.dup(2), "w")
    log = os.environ.get("MAGI_AOTI_LOG")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    started = time.time()
    import torch
    import torch._inductor  # noqa: F401
    if os.environ.get("MAGI_AOTI_PROFILE"):
        progress.write("magi: inductor: worker %s imported torch in %.1f s\n" % (worker, time.time() - started))
    message = None
    if expected_torch and torch.__version__.split("+")[0] != expected_torch.split("+")[0]:
        message = "this Python's torch is %s, but the process runs LibTorch %s" % (torch.__version__, expected_torch)
    else:
        try:
            settings = user_configs(torch._inductor.config, config_pairs, deterministic, torch.__version__)
        except ValueError as e:
            message = str(e)
    if message:
        for _, _, result, _ in tasks:
            _write_atomically(result, "error\n%s\n" % message)
        progress.write("magi: inductor: %s\n" % message)
        return 1
    if deterministic:
        # Inductor reads this while lowering (no atomic-add reductions). warn_only: ops run on fake
        # tensors here; the process that runs the package enforces error mode on its kernels.
        torch.use_deterministic_algorithms(True, warn_only=True)
    failures = 0
    # Claimed tasks whose package another process (another rank's compile) is making:
    # taken up once this worker has done everything else, by then usually finished.
    deferred = []
    for task in tasks:
        program, package, result, label = task
        try:  # claimed by another worker of this compile: it is that worker's
            os.close(os.open(result + ".claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        failed = _compile_task(torch, task, deterministic, precompile_headers, settings, worker, progress,
                               blocking=False)
        if failed is None:
            deferred.append(task)
        else:
            failures += failed
    for task in deferred:
        failures += _compile_task(torch, task, deterministic, precompile_headers, settings, worker, progress,
                                   blocking=True)
    return 1 if failures else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--probe":
        _probe()
        return 0
    if len(argv) != 2:
        sys.exit("usage: aoti_compile.py --probe | aoti_compile.py JOB")
    return _run_job(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))

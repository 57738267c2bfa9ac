"""A compile that dies fails its row alone; Ray stays on loopback; a missing linker is named."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import REPO, copy_project, latest_report, on_shared_ray, ray_auth_variables, run_farm, shrink_rmsnorm

from farm.contract import CompileRequest

# A test-only op: one healthy row (the real rmsnorm kernel), one row whose compile process aborts
# the way an LLVM instruction-selection error does (SIGABRT after a message on stderr), and one
# row that never finishes; and for the parent's own deadline, a row that ignores its alarm and one
# that kills its warm compile server mid-compile.
CRASHY_OP = """name: crashy
family: crashy
generator: crashy.gen
spec: crashy.spec
symbols: [rmsnorm_fwd_0]
targets: [gfx942]
groups:
  - name: all
    name_format: 'crashy_{mode}'
    axes:
      mode: [ok, abort, hang, alarm, killserver]
"""
CRASHY_SPEC = """def check_row(knobs):
    if knobs["mode"] not in ("ok", "abort", "hang", "alarm", "killserver"):
        raise ValueError(f"mode={knobs['mode']!r} unknown")
"""
CRASHY_GEN = """import os
import signal
import sys
import time


def launcher_and_args(knobs):
    if knobs["mode"] == "alarm":  # a compile that installs its own SIGALRM handler and never ends
        signal.signal(signal.SIGALRM, lambda *_: None)
        while True:
            time.sleep(3600)
    if knobs["mode"] == "killserver":  # only ever the warm zygote (the fresh path's parent is a Ray worker)
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            if b"farm.worker.zygote" in f.read():
                os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(3600)
    if knobs["mode"] == "abort":
        sys.stderr.write("LLVM ERROR: Cannot select: intrinsic %llvm.simulated.by.the.test\\n")
        sys.stderr.flush()
        os.abort()
    if knobs["mode"] == "hang":
        time.sleep(3600)
    from rmsnorm.rmsnorm_fwd import launcher_and_args as real
    return real({"dtype": "bf16", "phase": "infer", "n": 0})
"""


@pytest.fixture(scope="module")
def crashy_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = copy_project(tmp_path_factory.mktemp("crashy"))
    shrink_rmsnorm(project)
    (project / "conf" / "op" / "crashy.yaml").write_text(CRASHY_OP)
    config = project / "conf" / "config.yaml"
    config.write_text(config.read_text().replace("  - op@op_table.rmsnorm: rmsnorm\n",
                                                 "  - op@op_table.rmsnorm: rmsnorm\n  - op@op_table.crashy: crashy\n"))
    (project / "kernels_src" / "crashy").mkdir()
    (project / "kernels_src" / "crashy" / "spec.py").write_text(CRASHY_SPEC)
    (project / "kernels_src" / "crashy" / "gen.py").write_text(CRASHY_GEN)
    run_farm(project, "expand", check=True)
    return project


@pytest.mark.slow
@pytest.mark.parametrize("warm", ["true", "false"])
def test_a_dying_compile_fails_its_row_alone(crashy_project: Path, warm: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_farm(crashy_project, "build", "ops=[crashy]", "names=[crashy_ok,crashy_abort,crashy_hang]",
                    # The hung row costs the whole limit; the healthy one needs a few seconds on the fresh path.
                    f"outputs_dir={out}", "compile_timeout_s=15", f"executor.warm={warm}",
                    *on_shared_ray())  # fresh compile actors on the session's Ray cluster: no Ray start of its own
    assert proc.returncode == 1
    assert "built 1, failed 2" in proc.stderr
    assert "crashy/gfx942/crashy_abort failed: compiler process killed by signal 6" in proc.stderr
    assert "LLVM ERROR: Cannot select: intrinsic %llvm.simulated.by.the.test" in proc.stderr
    assert "crashy/gfx942/crashy_abort: compiler process killed by signal 6: LLVM ERROR: Cannot select" in proc.stderr
    assert "crashy/gfx942/crashy_hang failed: compile did not finish: time limit 15 s reached" in proc.stderr
    files = sorted(p.name for p in (out / "crashy" / "gfx942").iterdir())
    assert files == ["SOURCE.md", "crashy_ok.hsaco", "manifest.json"]
    check = run_farm(crashy_project, "-v", "check", "ops=[crashy]", f"outputs_dir={out}")
    assert "crashy_ok" not in check.stdout  # the healthy object is complete and verified
    # The failed rows left nothing: not built (listed with -v), not drift.
    assert check.returncode == 0 and "DRIFT" not in check.stdout, check.stdout
    assert f"NOT BUILT {out / 'crashy' / 'gfx942'}/: 4 of its 5 selected rows have no object" in check.stdout
    assert f"  {out / 'crashy' / 'gfx942' / 'crashy_abort.hsaco'}" in check.stdout.splitlines()
    report = latest_report(crashy_project)
    failed = {r["key"]: r for r in report["rows"] if not r["written"]}
    assert "LLVM ERROR" in failed["crashy/gfx942/crashy_abort"]["stderr"]


@pytest.mark.slow
@pytest.mark.cluster
def test_ray_stays_on_loopback_and_a_one_row_build_starts_one_compile_actor() -> None:
    import ray

    from farm.execute.executor import RayExecutor

    auth_before = ray_auth_variables()
    with RayExecutor({"kind": "local", "num_cpus": 2, "max_retries": 0}, 60, rows=1):
        nodes = ray.nodes()
        assert nodes and all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes if n["Alive"])
        # Two CPUs, one row: one compile actor (each starts a warm compile server), not one per CPU. The
        # executor has waited for its actors to answer, so they run under their titles by now.
        actors = []
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if (proc.cmdline() or [""])[0].startswith("ray::Compiler"):
                    actors.append(proc.pid)
        assert len(actors) == 1, actors
    # ray.init of the local cluster set RAY_AUTH_MODE=token in this process; the executor put it back, or a
    # later executor=cluster without authentication from this process would lose its actors at once.
    assert ray_auth_variables() == auth_before


def test_missing_linker_is_named_before_compiling(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    shadow = tmp_path / "shadow" / "ziglang"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")  # a ziglang without its zig binary
    proc = run_farm(project, "build", "targets=[gfx942]", "dtypes=[f32]",
                    env={"PYTHONPATH": f"{tmp_path / 'shadow'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert proc.returncode == 2
    assert "linker missing" in proc.stderr and "zig is not an executable" in proc.stderr
    assert "fix: reinstall" in proc.stderr
    assert not (project / "outputs").exists()


def test_dead_zygotes_leave_no_directories(tmp_path: Path) -> None:
    """Ray ends workers by signal, so a zygote's private directory is swept by the next zygote instead."""
    from farm.worker.warm import sweep_dead_zygote_homes

    dead_proc = subprocess.Popen(["true"])  # a pid that has exited and been reaped
    dead_proc.wait()
    for name, pid in (("farm-zygote-dead", dead_proc.pid), ("farm-zygote-live", os.getpid())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "zygote.pid").write_text(str(pid))
    (tmp_path / "farm-zygote-starting").mkdir()  # no pid file yet: left alone
    (tmp_path / "unrelated").mkdir()
    # A symlink planted among the homes is never followed (its target is not ours to delete).
    (tmp_path / "unrelated" / "zygote.pid").write_text(str(dead_proc.pid))
    (tmp_path / "farm-zygote-planted").symlink_to(tmp_path / "unrelated")
    sweep_dead_zygote_homes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["farm-zygote-live", "farm-zygote-planted",
                                                          "farm-zygote-starting", "unrelated"]
    assert (tmp_path / "unrelated" / "zygote.pid").is_file()


def _bounded_build(project: Path, *args: str, limit_s: float = 300) -> subprocess.CompletedProcess:
    """`farm build` that fails the test instead of hanging it (the bugs below were hangs)."""
    env = dict(os.environ)
    env.pop("FARM_PROJECT", None)
    return subprocess.run([sys.executable, "-m", "farm.cli", "build", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=limit_s)


@pytest.mark.slow
def test_parent_deadline_kills_a_compile_that_ignores_its_alarm(crashy_project: Path, tmp_path: Path) -> None:
    """Case 7: the child's own SIGALRM was the only time limit on the warm path; a compile with its own
    SIGALRM handler hung the row (and its worker) for good. The parent now kills it at the deadline."""
    # The limit holds for the healthy row too: with 5 s, a loaded CI run (3 test workers, 2 cores) did not build it.
    proc = _bounded_build(crashy_project, "ops=[crashy]", "names=[crashy_alarm,crashy_ok]", "compile_timeout_s=15",
                          "executor.num_cpus=1", f"outputs_dir={tmp_path / 'out'}")
    assert proc.returncode == 1, proc.stderr
    assert "crashy/gfx942/crashy_alarm failed: compile did not finish: time limit 15 s reached" in proc.stderr
    assert "built 1, failed 1" in proc.stderr, proc.stderr  # the same worker compiles the next row
    assert (tmp_path / "out" / "crashy" / "gfx942" / "crashy_ok.hsaco").is_file()


@pytest.mark.slow
def test_a_dead_compile_server_is_not_reported_as_a_time_limit(crashy_project: Path, tmp_path: Path) -> None:
    """Case 13: a zygote killed mid-compile was reported as `time limit 900 s`."""
    proc = _bounded_build(crashy_project, "ops=[crashy]", "names=[crashy_killserver,crashy_ok]",
                          "compile_timeout_s=900", "executor.num_cpus=1", f"outputs_dir={tmp_path / 'out'}")
    assert proc.returncode == 1, proc.stderr
    assert ("crashy/gfx942/crashy_killserver failed: compile did not finish: the warm compile server died "
            "(zygote killed by signal 9), not the time limit") in proc.stderr, proc.stderr
    assert "time limit 900 s reached" not in proc.stderr
    assert "built 1, failed 1" in proc.stderr  # a new zygote compiles the next row
    report = latest_report(crashy_project)
    [dead] = [r for r in report["rows"] if r["key"].endswith("crashy_killserver")]
    assert "[the warm compile server died]" in dead["stderr"]


@pytest.fixture()
def rmsnorm_request() -> Iterator[tuple[CompileRequest, dict[str, bytes], Any]]:
    """One real row, and a warm server of this process's own (its zygote stopped, by its pids, at the end)."""
    from farm.build import compile_request
    from farm.plan.sources import collect
    from farm.table import config as config_mod
    from farm.table.expand import fresh_rows
    from farm.worker.warm import WarmServer

    cfg = config_mod.load(REPO, ["ops=[rmsnorm]", "targets=[gfx942]", "dtypes=[f32]"])
    rows, _ = fresh_rows(cfg)
    server = WarmServer()
    yield compile_request(cfg, rows[0]), collect(cfg.kernels_dir), server
    server.stop()


def test_lost_linker_shim_is_recreated_and_its_error_named(rmsnorm_request: tuple[CompileRequest, dict, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Case 8: a temp cleaner deleting the zygote home's `ld.lld` shim failed every later compile of that
    worker, and the console showed MLIR text instead of the linker's failure."""
    from farm.worker import isolate, warm
    from farm.worker.environment import short_private_dir

    request, sources, server = rmsnorm_request
    first = isolate.compile_isolated(request, sources, 120, server)
    assert first.ok, first.error
    zygote = server.zygote
    assert zygote is not None and zygote.home.parent == short_private_dir("zygotes")
    shim = zygote.home / "rocm" / "llvm" / "bin" / "ld.lld"
    # Without the recreation (the old code), the linker is missing: the error names lld, not MLIR.
    shim.unlink()
    with monkeypatch.context() as patch:
        patch.setattr(warm, "write_linker_shim", lambda rocm, linker=None: rocm)
        failed = isolate.compile_isolated(request, sources, 120, server)
    assert not failed.ok and failed.error is not None
    assert failed.error.startswith("compiler process exited with status 1: ")
    assert "lld invocation failed" in failed.error and "llvm.func" not in failed.error
    # With it: the shim is written again before the compile, the same zygote compiles.
    again = isolate.compile_isolated(request, sources, 120, server)
    assert again.ok, again.error
    assert again.elf == first.elf and server.zygote is zygote and shim.is_file()
    # The whole home gone (socket included): a new zygote pair starts and compiles.
    shutil.rmtree(zygote.home)
    fresh = isolate.compile_isolated(request, sources, 120, server)
    assert fresh.ok, fresh.error
    assert fresh.elf == first.elf and server.zygote is not zygote
    assert zygote.proc.poll() is not None and zygote.binary.poll() is not None  # the old pair was ended


def test_cause_of_prefers_error_lines_to_mlir_text() -> None:
    from farm.worker.outcome import cause_of

    log = ('Traceback (most recent call last):\n  File "x.py", line 1, in f\n    raise RuntimeError(x)\n'
           "RuntimeError: LLVM codegen (gpu-module-to-binary) failed in its own process (exit 1):\n"
           'error: "-":2:3: lld invocation failed\n'
           ' note: "-":2:3: see current operation:\n  "llvm.func"() <{sym_name = "k"}> ({\n'
           + "    }) : () -> ()\n" * 40)
    assert cause_of(log) == 'error: "-":2:3: lld invocation failed'
    assert cause_of("noise\nValueError: mode='x' unknown\n") == "ValueError: mode='x' unknown"
    assert cause_of("nothing to see\n") == ""


def test_a_traceback_names_the_kernel_file_not_the_private_copy() -> None:
    """Issue 15: a kernel that raised while tracing showed its private copy's path (a temp directory that
    is gone by then); the traceback names the file to edit under kernels_src/."""
    from farm.contract import TargetFacts
    from farm.worker.isolate import compile_isolated

    source = b"def launcher_and_args(knobs):\n    raise ValueError('traced wrong')\n"
    request = CompileRequest(key="boom/gfx942/boom", generator="boom.gen", knobs={},
                             target=TargetFacts("gfx942", "gfx942", "gfx942"))
    result = compile_isolated(request, {"boom/gen.py": source, "boom/__init__.py": b""}, 300, None)
    assert not result.ok and result.error is not None
    assert result.error.endswith("ValueError: traced wrong"), result.error
    assert 'File "kernels_src/boom/gen.py", line 2, in launcher_and_args' in result.stderr, result.stderr
    assert "farm-compile-" not in result.stderr


# A fresh interpreter imports `mod` from a kernels root and prints what it got and how often the import
# system compiled source (counted by wrapping builtins.compile, which it calls for every source it compiles).
IMPORT_AND_COUNT = """import builtins, json, sys
calls = []
real = builtins.compile
builtins.compile = lambda *a, **k: (calls.append(a[1]), real(*a, **k))[1]
sys.path.insert(0, sys.argv[1])
import mod
print(json.dumps({"value": mod.VALUE, "file": mod.where.__code__.co_filename, "compiled": calls}))
"""


def _import_in_fresh_interpreter(root: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", IMPORT_AND_COUNT, str(root)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}, check=True)
    return json.loads(proc.stdout)


def test_kernel_bytecode_is_used_only_while_its_source_is_unchanged(tmp_path: Path) -> None:
    """The worker's pyc of a kernel source is imported instead of compiling it, in another private directory
    too (the functions then name the file actually imported); a source changed after its pyc was written is
    compiled and run as it is now, never from the stale bytecode."""
    from farm.worker.bytecode import write_bytecode

    first, second = tmp_path / "row1", tmp_path / "row2"
    sources = {"mod.py": b"VALUE = 1\ndef where():\n    pass\n"}
    for root in (first, second):
        root.mkdir()
        (root / "mod.py").write_bytes(sources["mod.py"])
        write_bytecode(sources, root)
    got = _import_in_fresh_interpreter(second)
    assert got == {"value": 1, "file": str(second / "mod.py"), "compiled": []}
    (second / "mod.py").write_bytes(b"VALUE = 2\ndef where():\n    pass\n")  # same length, other bytes
    got = _import_in_fresh_interpreter(second)
    assert got == {"value": 2, "file": str(second / "mod.py"), "compiled": [str(second / "mod.py")]}


def test_a_kernel_source_that_warns_or_fails_to_compile_gets_no_bytecode(tmp_path: Path) -> None:
    """Its compile process compiles it itself, so the warning or the error reaches the row's log as before."""
    from farm.worker.bytecode import write_bytecode

    sources = {"warns.py": b"x = 1 is 1\n", "broken.py": b"def (:\n", "fine.py": b"x = 1\n", "notes.md": b"#\n"}
    write_bytecode(sources, tmp_path)
    assert sorted(p.name for p in (tmp_path / "__pycache__").iterdir()) == [f"fine.{sys.implementation.cache_tag}.pyc"]


def test_modules_since_a_mark_are_exactly_those_added_or_none() -> None:
    """A forked compile looks only at the modules it added (farm/worker/farm_code.py); when one it inherited
    was removed, it cannot tell which are new and says so (its caller then walks them all)."""
    import types

    from farm.worker.farm_code import mark_modules, modules_since

    names = [f"_farm_test_mod_{i}" for i in range(3)]
    try:
        mark = mark_modules()
        added = [sys.modules.setdefault(n, types.ModuleType(n)) for n in names[:2]]
        assert modules_since(mark) == added
        assert mark.last is not None  # the mark's last module, removed and put back: now after those added
        sys.modules[mark.last] = sys.modules.pop(mark.last)
        assert modules_since(mark) is None
        mark = mark_modules()
        sys.modules.pop(names[0])  # one removed, one added: the same count, but not the same modules
        sys.modules[names[2]] = types.ModuleType(names[2])
        assert modules_since(mark) is None
    finally:
        for name in names:
            sys.modules.pop(name, None)


def test_a_fork_records_the_farm_code_its_server_loaded_and_what_it_added() -> None:
    """loaded_farm_files after the warm server's mark is the same record as walking every module."""
    import importlib

    from farm.worker import farm_code

    # A leaf module without side effects, imported anew after the mark (whatever this session loaded before).
    name = "farm.toolchain.filehash"
    saved = sys.modules.pop(name, None)
    try:
        farm_code.remember_loaded()
        importlib.import_module(name)
        recorded = farm_code.loaded_farm_files()
        assert recorded == farm_code.farm_files(list(sys.modules.values()))
        assert "toolchain/filehash.py" in recorded
    finally:
        farm_code._SERVER.clear()
        if saved is not None:
            sys.modules[name] = saved


RECORD_A_KERNEL = """import json, sys, types
from pathlib import Path
from farm.worker.lowering import SourceRecorder
root = Path(sys.argv[1])
recorder = SourceRecorder(root)
if sys.argv[2] == "remove":  # a module loaded before the start is removed: the recorder walks every module
    sys.modules.pop(next(reversed(sys.modules)))
sys.path.insert(0, str(root))
import kern.gen
print(json.dumps(recorder.consulted().read))
"""


@pytest.mark.parametrize("remove", ["keep", "remove"])
def test_the_recorder_names_the_kernel_modules_a_compile_imported(tmp_path: Path, remove: str) -> None:
    (tmp_path / "kern").mkdir()
    (tmp_path / "kern" / "__init__.py").write_text("")
    (tmp_path / "kern" / "gen.py").write_text("from kern import util\n")
    (tmp_path / "kern" / "util.py").write_text("X = 1\n")
    proc = subprocess.run([sys.executable, "-c", RECORD_A_KERNEL, str(tmp_path), remove], capture_output=True,
                          text=True, check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                                                       "PYTHONDONTWRITEBYTECODE": "1"})
    assert json.loads(proc.stdout) == ["kern/__init__.py", "kern/gen.py", "kern/util.py"]


def test_rows_work_on_a_memory_filesystem_unless_tmpdir_is_chosen(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """A row's private directory is written and removed at every row: on a memory filesystem when there is
    one, unless the caller chose a TMPDIR (honoured as before); none usable: the default temp directory."""
    from farm.worker import scratch as isolate

    monkeypatch.setattr(isolate, "MEMORY_FS", tmp_path)
    monkeypatch.delenv("TMPDIR", raising=False)
    assert isolate.scratch_parent() == str(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "chosen"))
    assert isolate.scratch_parent() is None
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setattr(isolate, "MEMORY_FS_MIN_FREE", 1 << 62)  # no room
    assert isolate.scratch_parent() is None
    monkeypatch.setattr(isolate, "MEMORY_FS", tmp_path / "absent")
    assert isolate.scratch_parent() is None


def test_row_directories_of_gone_workers_are_swept_and_no_other(tmp_path: Path) -> None:
    """A worker killed mid-row leaves its row directory; the next worker's first row removes it. A live
    worker's directory, a name without a pid, another kind of file and a symlink are left alone."""
    from farm.worker import scratch

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process (until reused, when its directory is merely kept)
    dead = tmp_path / f"farm-compile-{gone.pid}-abc"
    (dead / "kernels_src").mkdir(parents=True)
    (dead / "kernels_src" / "k.py").write_text("x = 1\n")
    alive = tmp_path / f"farm-compile-{os.getpid()}-def"
    alive.mkdir()
    old_style = tmp_path / "farm-compile-xyz"
    old_style.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f"farm-compile-{gone.pid}-lnk").symlink_to(target)
    (tmp_path / f"farm-compile-{gone.pid}-file").write_text("")
    assert scratch.sweep_dead_rows(tmp_path) == [dead]
    assert not dead.exists() and alive.is_dir() and old_style.is_dir() and target.is_dir()
    assert (tmp_path / f"farm-compile-{gone.pid}-lnk").is_symlink()

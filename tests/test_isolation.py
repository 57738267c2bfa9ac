"""A compile that dies fails its row alone; Ray stays on loopback; a missing linker is named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import copy_project, run_farm, shrink_rmsnorm

# A test-only op: one healthy row (the real rmsnorm kernel), one row whose compile process aborts
# the way an LLVM instruction-selection error does (SIGABRT after a message on stderr), and one
# row that never finishes.
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
      mode: [ok, abort, hang]
"""
CRASHY_SPEC = """def check_row(knobs):
    if knobs["mode"] not in ("ok", "abort", "hang"):
        raise ValueError(f"mode={knobs['mode']!r} unknown")
"""
CRASHY_GEN = """import os
import sys
import time


def launcher_and_args(knobs):
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


@pytest.mark.parametrize("warm", ["true", "false"])
def test_a_dying_compile_fails_its_row_alone(crashy_project: Path, warm: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_farm(crashy_project, "build", "ops=[crashy]", f"outputs_dir={out}", "compile_timeout_s=20",
                    f"executor.warm={warm}")
    assert proc.returncode == 1
    assert "built 1, failed 2" in proc.stderr
    assert "crashy/gfx942/crashy_abort failed: compiler process killed by signal 6" in proc.stderr
    assert "LLVM ERROR: Cannot select: intrinsic %llvm.simulated.by.the.test" in proc.stderr
    assert "crashy/gfx942/crashy_hang failed: compile did not finish (time limit 20 s" in proc.stderr
    files = sorted(p.name for p in (out / "crashy" / "gfx942").iterdir())
    assert files == ["SOURCE.md", "crashy_ok.hsaco", "manifest.json"]
    check = run_farm(crashy_project, "check", "ops=[crashy]", f"outputs_dir={out}")
    assert "crashy_ok" not in check.stdout  # the healthy object is complete and verified
    assert "crashy_abort.hsaco: row crashy/gfx942/crashy_abort has no entry" in check.stdout
    report = json.loads((crashy_project / ".farm" / "reports" / "latest-build.json").read_text())
    failed = {r["key"]: r for r in report["rows"] if not r["written"]}
    assert "LLVM ERROR" in failed["crashy/gfx942/crashy_abort"]["stderr"]


def test_ray_stays_on_loopback() -> None:
    import ray

    from farm.executor import RayExecutor

    with RayExecutor({"kind": "local", "num_cpus": 1, "max_retries": 0}, 60):
        nodes = ray.nodes()
        assert nodes and all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes if n["Alive"])


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
    import subprocess

    from farm.compile.isolate import sweep_dead_zygote_homes

    dead_proc = subprocess.Popen(["true"])  # a pid that has exited and been reaped
    dead_proc.wait()
    for name, pid in (("farm-zygote-dead", dead_proc.pid), ("farm-zygote-live", os.getpid())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "zygote.pid").write_text(str(pid))
    (tmp_path / "farm-zygote-starting").mkdir()  # no pid file yet: left alone
    (tmp_path / "unrelated").mkdir()
    sweep_dead_zygote_homes(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["farm-zygote-live", "farm-zygote-starting", "unrelated"]

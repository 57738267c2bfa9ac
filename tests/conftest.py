"""Shared fixtures: a private copy of the project per test module, and a way to run `farm` in it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from farm.toolchain.pin_file import pin_text

REPO = Path(__file__).resolve().parent.parent

# No test's build auto-starts a standing cluster (it would outlive the test): the farm's CI switch, set
# for the whole session and inherited by every `farm` the tests run. tests/test_warm_default.py turns it
# off for its own builds and stops what they start.
os.environ["CI"] = "true"

# A small rmsnorm table that still covers every target, both tiers, both phases and three dtype forms.
SMALL_RMSNORM_GROUPS = """groups:
  - name: baked
    name_format: 'rmsnorm_{dtype}_{phase}_n{n}'
    axes:
      dtype: [bf16, f16_f32gamma]
      phase: [train]
      n: [2560, 16384]
  - name: generic
    name_format: 'rmsnorm_{dtype}_{phase}_generic'
    axes:
      dtype: [f32, bf16]
      phase: [infer]
      n: [0]
"""
SMALL_ROWS_PER_TARGET = 6


def copy_project(dest: Path) -> Path:
    """conf/, kernels_src/ and instances/ of this checkout, in `dest` (the farm package stays installed)."""
    for name in ("conf", "kernels_src", "instances"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def burn_cpu(cpu_s: float = 0.03) -> None:
    """Spend `cpu_s` of this thread's CPU: a fixed amount of work took 9 ms on a fast machine, under what the
    verify-thread checks need, and ~40 ms on a slow one."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        hashlib.sha256(b"burn").hexdigest()


def built_copy(built: Path, dest: Path) -> Path:
    """A private copy of a built project (sources, table, outputs), to damage freely."""
    for name in ("conf", "kernels_src", "instances", "outputs"):
        shutil.copytree(built / name, dest / name)
    return dest


def built_one_target_copy(built: Path, dest: Path, target: str) -> Path:
    """`built_copy` whose outputs/ holds only `target`'s directories: byte for byte what `farm build
    targets=[target]` writes in a fresh copy of the small project (a rebuild anywhere is identical:
    tests/test_audit.py), without building again."""
    project = built_copy(built, dest)
    for directory in (project / "outputs").glob("*/*"):
        if directory.name != target:
            shutil.rmtree(directory)
    return project


def shrink_op(project: Path, op: str, groups_yaml: str) -> None:
    """Replace an op's groups with a small table (then `farm expand` must run)."""
    path = project / "conf" / "op" / f"{op}.yaml"
    text = path.read_text()
    path.write_text(text[: text.index("groups:")] + groups_yaml)


def shrink_rmsnorm(project: Path) -> None:
    shrink_op(project, "rmsnorm", SMALL_RMSNORM_GROUPS)


def run_farm(project: Path, *args: str, env: dict[str, str] | None = None,
             cwd: Path | None = None, check: bool = False) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("FARM_PROJECT", None)
    full_env.update(env or {})
    if cwd is not None and cwd != project:
        full_env["FARM_PROJECT"] = str(project)
    proc = subprocess.run([sys.executable, "-m", "farm.cli", *args], cwd=cwd or project, env=full_env,
                          capture_output=True, text=True, timeout=1800)
    if check and proc.returncode != 0:
        raise AssertionError(f"farm {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def stop_cluster(project: Path) -> None:
    """End whatever standing cluster a test started in `project`, even one still coming up."""
    from farm.execute import standing_files

    if standing_files.starting(project):
        try:
            standing_files.wait_up(project, None, 120)
        except Exception:  # noqa: BLE001 (it failed to come up: nothing left to stop)
            pass
    run_farm(project, "cluster", "down")


LLD19 = Path("/usr/lib/llvm-19/bin/ld.lld")
# The disassembler block of the project's pin, for test toolchains (verification stays the same).
PINNED_DISASSEMBLER = "disassembler:" + (REPO / "conf/toolchain/pinned.yaml").read_text().split("\ndisassembler:")[1]


def write_lld19_toolchain(project: Path, name: str) -> None:
    """conf/toolchain/<name>.yaml pinning Debian's LLD 19: a second, real toolchain for the tests."""
    assert os.access(LLD19, os.X_OK), f"{LLD19} missing: run scripts/setup.sh --tests (apt lld-19)"
    digest = hashlib.sha256(LLD19.read_bytes()).hexdigest()
    pin = yaml.safe_load((REPO / "conf/toolchain/pinned.yaml").read_text())  # the same Python toolchain
    pin["linker"] = {"path": str(LLD19), "version": "Debian LLD 19.1.7", "sha256": digest}
    (project / "conf" / "toolchain" / f"{name}.yaml").write_text(pin_text(pin))



def edit(path: Path, old: str, new: str) -> None:
    """Replace the first `old` in the file with `new`; `old` must be there."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def small_copy(dest: Path) -> Path:
    """A project copy with the small rmsnorm table, selecting only rmsnorm by default
    (tests that need other ops select them: ops=[...]). `farm expand` still has to run."""
    project = copy_project(dest)
    shrink_rmsnorm(project)
    config = project / "conf" / "config.yaml"
    config.write_text(config.read_text().replace("\nops: []", "\nops: [rmsnorm]", 1))
    return project


def small_one_target_copy(dest: Path, target: str) -> Path:
    """`small_copy` selecting one target, with its table expanded (the cluster tests' project)."""
    project = small_copy(dest)
    config = project / "conf" / "config.yaml"
    config.write_text(config.read_text().replace("\ntargets: []", f"\ntargets: [{target}]", 1))
    run_farm(project, "expand", check=True)
    return project


@pytest.fixture(scope="session")
def small_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with the small rmsnorm table expanded (no objects yet)."""
    project = small_copy(tmp_path_factory.mktemp("small"))
    run_farm(project, "expand", check=True)
    return project


@pytest.fixture(scope="session")
def built(small_project: Path) -> Path:
    """The small project built once into its outputs/ (every target: real compiles)."""
    run_farm(small_project, "build", check=True)
    return small_project

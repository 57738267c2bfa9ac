"""Careless or hostile input: every case is one clear error (exit 2) naming the thing and the fix, before
any work is done; nothing is lost; no traceback. None of these tests compiles anything."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import copy_project, run_farm, small_copy


def refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The one error a refused command prints: exit 2, no traceback, every needle in it."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count(": error: ") == 1 and "\n  fix: " in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    return proc.stderr


# --------------------------------------------------------------------------------------------------
# 11: raw tracebacks instead of one clear error.


@pytest.mark.parametrize(("override", "says"), [
    ("compile_timeout_s=abc", "compile_timeout_s='abc' is not a positive number"),
    ("audit.sample=x", "audit.sample='x' is not a positive whole number of rows"),
    ("executor.num_cpus=abc", "executor.num_cpus='abc' is not a positive whole number"),
    ("compile_timeout_s=[1]", "compile_timeout_s=[1] is not a positive number"),
])
def test_non_numeric_option_values_are_one_clear_error(small_project: Path, override: str, says: str) -> None:
    refused(run_farm(small_project, "plan", override), says)


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "61"])
def test_a_bad_batch_gather_setting_is_refused_before_any_work(small_project: Path, tmp_path: Path,
                                                               value: str) -> None:
    out = tmp_path / "out"
    proc = run_farm(small_project, "build", f"outputs_dir={out}", env={"FARM_BATCH_GATHER_S": value})
    refused(proc, f"FARM_BATCH_GATHER_S={value!r} is not a number of seconds from 0 to 60", "unset it")
    assert "rows=" not in proc.stderr and not list(out.rglob("*.hsaco"))


def test_override_without_a_key_is_refused(small_project: Path) -> None:
    refused(run_farm(small_project, "plan", "=1"), "malformed override '=1'", "with a key")
    refused(run_farm(small_project, "plan", "executor=1"), "config error in executor=1", "conf/<group>/")


def test_plan_piped_into_head_exits_quietly(small_project: Path) -> None:
    """`farm plan -v | head -3`: the reader leaves after 3 lines of ~1,450 (more than a pipe holds)."""
    env = {k: v for k, v in os.environ.items() if k != "FARM_PROJECT"}
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", "plan", "-v", "ops=[]"], cwd=small_project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        head = [proc.stdout.readline() for _ in range(3)]
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert all(line.strip() for line in head)
    assert err == "", err  # no BrokenPipeError traceback, no "Exception ignored" at exit
    assert code == 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


# --------------------------------------------------------------------------------------------------
# 11: directories that cannot be written, found before any compile.


def unprivileged() -> list[str]:
    """A command prefix under which permission bits apply: root without CAP_DAC_OVERRIDE."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to test permissions as root"
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


def run_unprivileged(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_bounded(project, *args, prefix=unprivileged(), timeout=timeout)


def run_bounded(project: Path, *args: str, prefix: list[str] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """`farm ARGS` in `project`; a command that hangs fails the test (subprocess.run kills it on timeout)."""
    env = {k: v for k, v in os.environ.items() if k != "FARM_PROJECT"}
    return subprocess.run([*(prefix or []), sys.executable, "-m", "farm.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    yield directory
    directory.chmod(0o755)  # so that pytest can remove it


def test_read_only_outputs_dir_is_refused_before_compiling(small_project: Path, read_only_dir: Path,
                                                           tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    proc = run_unprivileged(small_project, "build", f"outputs_dir={read_only_dir}", f"report_dir={reports}")
    refused(proc, f"cannot write to outputs_dir {read_only_dir}: permission denied", "nothing was built")
    assert "rows=" not in proc.stderr  # stopped before planning, so before any compile
    assert not reports.exists()
    # A directory it would create inside a read-only one: named, with where it would be created.
    proc = run_unprivileged(small_project, "build", f"outputs_dir={read_only_dir / 'out'}", f"report_dir={reports}")
    refused(proc, f"outputs_dir {read_only_dir / 'out'} (it would be created in {read_only_dir})")


def test_unwritable_report_dir_is_refused_before_compiling(small_project: Path, read_only_dir: Path,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_unprivileged(small_project, "build", f"outputs_dir={out}", f"report_dir={read_only_dir / 'r'}")
    refused(proc, "cannot write to report_dir", str(read_only_dir), "report_dir=PATH")
    assert not out.exists()


def test_outputs_dir_that_is_a_symlink_or_not_a_directory_is_refused(small_project: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    refused(run_farm(small_project, "build", f"outputs_dir={tmp_path / 'link'}", f"report_dir={tmp_path / 'r'}"),
            f"outputs_dir {tmp_path / 'link'} is a symlink (to {real})")
    (tmp_path / "file").write_text("mine")
    refused(run_farm(small_project, "build", f"outputs_dir={tmp_path / 'file' / 'out'}", f"report_dir={tmp_path}/r"),
            f"{tmp_path / 'file'}, on the way to {tmp_path / 'file' / 'out'}, is a regular file, not a directory")
    assert (tmp_path / "file").read_text() == "mine" and not any(real.iterdir())


def test_pull_into_a_read_only_outputs_dir_is_refused(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "p")
    (project / "outputs").mkdir()
    (project / "outputs").chmod(0o555)
    try:
        refused(run_unprivileged(project, "pull"), f"cannot write to outputs_dir {project / 'outputs'}")
    finally:
        (project / "outputs").chmod(0o755)


def test_pin_into_a_read_only_conf_toolchain_is_refused(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    pin = project / "conf" / "toolchain" / "pinned.yaml"
    before = pin.read_text().replace("flydsl: 0.3.4", "flydsl: 0.0.1")  # a pin that must move
    assert before != pin.read_text()
    pin.write_text(before)
    pin.parent.chmod(0o555)
    try:
        refused(run_unprivileged(project, "pin"), f"cannot write to the toolchain pin's directory {pin.parent}")
    finally:
        pin.parent.chmod(0o755)
    assert pin.read_text() == before


# --------------------------------------------------------------------------------------------------
# 12: bad values that were accepted silently.


@pytest.mark.parametrize(("override", "says"), [
    ("outputs_dir=", "outputs_dir is empty, not a directory path"),
    ("outputs_dir=null", "outputs_dir is null, not a directory path"),
    ("instances_dir=", "instances_dir is empty"),
    ("kernels_dir=null", "kernels_dir is null"),
    ("report_dir=", "report_dir is empty"),
])
def test_empty_or_null_directory_is_refused(small_project: Path, override: str, says: str) -> None:
    refused(run_farm(small_project, "build", override), says, "drop the")
    assert not (small_project / "None").exists()


def test_outputs_dir_pointing_at_the_project_is_refused(small_project: Path, tmp_path: Path) -> None:
    inputs = "is inside the project's inputs"
    for value, says in ((".", "is the project root"), ("..", "contains the project root"), ("conf", inputs),
                        ("kernels_src/x", inputs)):
        refused(run_farm(small_project, "build", f"outputs_dir={value}"), says, "the farm deletes stray files")
    other = copy_project(tmp_path / "other")
    refused(run_farm(small_project, "plan", f"outputs_dir={other}"), "holds conf/ or kernels_src/")
    assert run_farm(small_project, "plan", f"outputs_dir={tmp_path / 'fine'}").returncode == 0


@pytest.mark.parametrize("value", ["0", "-5", "inf"])
def test_non_positive_compile_timeout_is_refused(small_project: Path, value: str) -> None:
    refused(run_farm(small_project, "build", f"compile_timeout_s={value}"), "is not a positive number")


def test_positive_compile_timeout_is_accepted(small_project: Path) -> None:
    assert run_farm(small_project, "plan", "compile_timeout_s=1.5").returncode == 0


@pytest.mark.parametrize("value", ["-5", "-1", "0", "1.5", "true"])
def test_audit_sample_must_be_null_or_positive(small_project: Path, value: str) -> None:
    refused(run_farm(small_project, "audit", f"audit.sample={value}"), "audit.sample=", "audit.sample=null")


@pytest.mark.parametrize("verb", ["plan", "build", "check", "audit"])
def test_selection_matching_no_row_fails(small_project: Path, verb: str) -> None:
    # The names exist, but not together: sdpa_cdna is never built for gfx11-generic.
    refused(run_farm(small_project, verb, "ops=[sdpa_cdna]", "targets=[gfx11-generic]", "dtypes=[bf16]"),
            "no row matches the selection ops=[sdpa_cdna] targets=[gfx11-generic] dtypes=[bf16]",
            "sdpa_cdna: gfx90a, gfx942, gfx950")


def test_selection_emptied_by_a_group_target_limit_fails(tmp_path: Path) -> None:
    """Op and target match, but no group of the op is built for that target: zero rows."""
    project = small_copy(tmp_path / "p")
    op = project / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text().replace("  - name: generic\n", "  - name: generic\n    targets: [gfx942]\n")
                  .replace("  - name: baked\n", "  - name: baked\n    targets: [gfx942]\n"))
    run_farm(project, "expand", check=True)
    refused(run_farm(project, "plan", "targets=[gfx950]"),
            "no row matches the selection ops=[rmsnorm] targets=[gfx950]")
    assert run_farm(project, "plan", "targets=[gfx942]").returncode == 0


@pytest.mark.parametrize(("override", "says"), [
    ("executor.num_cpus=0", "executor.num_cpus=0 is not a positive whole number"),
    ("executor.max_retries=-1", "executor.max_retries=-1 is not a whole number of 0 or more"),
    ("executor.standing_idle_minutes=0", "executor.standing_idle_minutes=0 is not a positive number"),
    ("executor.warm=yes", "executor.warm='yes' is not true or false"),
    ("row_order=sideways", "row_order='sideways'; accepted: sorted, reversed"),
    ("audit.vary.umask=maybe", "audit.vary.umask='maybe' is not true or false"),
    ("+audit.vary.umaks=false", "did you mean 'audit.vary.umask'?"),
])
def test_executor_and_audit_values_are_validated(small_project: Path, override: str, says: str) -> None:
    refused(run_farm(small_project, "plan", override), says)


def test_valid_values_are_still_accepted(small_project: Path) -> None:
    proc = run_farm(small_project, "plan", "executor.num_cpus=1", "executor.max_retries=0", "audit.sample=null",
                    "executor.standing_idle_minutes=0.5", "audit.vary.umask=false", "row_order=reversed")
    assert proc.returncode == 0, proc.stderr


def test_unknown_key_in_an_op_group_is_refused(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "p")
    op = project / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text().replace("  - name: generic\n", "  - name: generic\n    tagets: [gfx942]\n"))
    refused(run_farm(project, "plan"), "conf/op/rmsnorm.yaml groups[1]: unknown key 'tagets' (did you mean 'targets'?)")


# --------------------------------------------------------------------------------------------------
# 13: farm diff names what a path is instead of "no such file", and never blocks on a FIFO.


def test_diff_names_what_a_non_file_is(small_project: Path, tmp_path: Path) -> None:
    regular = tmp_path / "a.hsaco"
    regular.write_bytes(b"\x7fELF")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    cases = {str(tmp_path): f"{tmp_path} is a directory", str(fifo): f"{fifo} is not a regular file (it is a FIFO)",
             "/dev/null": "/dev/null is not a regular file (it is a character device)",
             str(tmp_path / "gone"): f"no such file: {tmp_path / 'gone'}"}
    for path, says in cases.items():
        # A FIFO opened for reading would block until a writer came: the timeout would fail the test.
        refused(run_bounded(small_project, "diff", path, str(regular), timeout=60), says)
        refused(run_bounded(small_project, "diff", str(regular), path, timeout=60), says)

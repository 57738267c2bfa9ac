"""Case 10: the families' spec modules are project code anyone can break. A syntax error, an exception, an
exit or an endless loop in one must give one clear error naming file:line, within a time limit, and must
not stop commands that select only other families. (The spec code runs in a child interpreter.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import copy_project, last_line

from farm.table.kernel_modules import SpecFailure, check_rows

LIMIT = {"FARM_SPEC_TIMEOUT_S": "2"}
DOCSTRING = '    """Raise ValueError if the kernel cannot serve this knob row."""\n'  # rmsnorm's check_row


def farm(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`farm ARGS` in `project`, bounded: a hang fails the test instead of stalling the suite."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("FARM_PROJECT", "FARM_SPEC_TIMEOUT_S")}
    return subprocess.run([sys.executable, "-m", "farm.cli", *args], cwd=project, env=full_env | (env or {}),
                          capture_output=True, text=True, timeout=120)


def break_spec(project: Path, rel: str, old: str, new: str) -> int:
    """Replace `old` by `new` in kernels_src/<rel>; returns the 1-based line where `new` starts."""
    path = project / "kernels_src" / rel
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return text[: text.index(old)].count("\n") + 1


def appended_line(project: Path, rel: str, code: str) -> int:
    """Append `code` to kernels_src/<rel>; returns its first line number."""
    path = project / "kernels_src" / rel
    text = path.read_text()
    path.write_text(text + code)
    return text.count("\n") + 1


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    return copy_project(tmp_path)


def assert_one_clear_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert "fix:" in proc.stderr and "Traceback" not in proc.stderr


# ---- through the CLI -------------------------------------------------------------------------------


def test_case10_syntax_error_names_file_line_and_spares_other_families(project: Path) -> None:
    line = appended_line(project, "rmsnorm/spec.py", "def broken(:\n")
    other = farm(project, "plan", "ops=[sdpa_cdna]")
    assert other.returncode == 0 and last_line(other.stdout).startswith("rows=212 "), other.stderr
    assert farm(project, "expand", "--check", "ops=[sdpa_cdna,rmsnorm_bwd]").returncode == 0
    for verb in ("plan", "check", "expand"):
        proc = farm(project, verb)
        assert_one_clear_error(proc, f"kernels_src/rmsnorm/spec.py:{line}: SyntaxError: invalid syntax "
                                     "(spec module rmsnorm.spec of op 'rmsnorm')")


def test_case10_endless_loop_at_import_is_stopped_and_located(project: Path) -> None:
    line = appended_line(project, "sdpa_cdna/spec.py", "while True: pass\n")
    started = time.monotonic()
    proc = farm(project, "plan", env=LIMIT)
    assert_one_clear_error(proc, "did not finish within 2 s")
    # The line it was spinning on, in the module of op sdpa_cdna (the first selected op using it).
    assert f"kernels_src/sdpa_cdna/spec.py:{line}: spec code did not finish" in proc.stderr
    assert "spec module sdpa_cdna.spec of op 'sdpa_cdna'" in proc.stderr and "FARM_SPEC_TIMEOUT_S" in proc.stderr
    assert time.monotonic() - started < 60
    assert farm(project, "plan", "ops=[rmsnorm,sdpa_rdna]", env=LIMIT).returncode == 0


def test_case10_endless_check_row_is_stopped_and_located(project: Path) -> None:
    line = break_spec(project, "rmsnorm/spec.py", DOCSTRING,
                      "    while knobs: pass\n")
    proc = farm(project, "plan", "ops=[rmsnorm]", env=LIMIT)
    assert_one_clear_error(proc, f"kernels_src/rmsnorm/spec.py:{line}: spec code did not finish within 2 s")


@pytest.mark.parametrize(("code", "needle"), [
    ("    raise KeyError('n')\n", "KeyError: 'n'"),
    ("    import sys; sys.exit(3)\n", "SystemExit: 3"),
    ("    return 1 / 0\n", "ZeroDivisionError: division by zero"),
])
def test_case10_check_row_crash_names_file_line_and_row(project: Path, code: str, needle: str) -> None:
    line = break_spec(project, "rmsnorm/spec.py", DOCSTRING,
                      code)
    proc = farm(project, "plan", "ops=[rmsnorm]")
    assert_one_clear_error(proc, f"kernels_src/rmsnorm/spec.py:{line}: {needle} (spec module rmsnorm.spec of op "
                                 "'rmsnorm', in check_row for op 'rmsnorm' group ")


def test_case10_hard_exit_is_named(project: Path) -> None:
    appended_line(project, "rmsnorm_bwd/spec.py", "import os\nos._exit(7)\n")
    proc = farm(project, "plan", "ops=[rmsnorm_bwd]")
    assert_one_clear_error(proc, "kernels_src/rmsnorm_bwd/spec.py: the interpreter running spec code ended "
                                 "(exit status 7)")


def test_case10_missing_check_row(project: Path) -> None:
    break_spec(project, "sdpa_decode/spec.py", "def check_row(", "def check_row_renamed(")
    proc = farm(project, "plan", "ops=[sdpa_rdna_decode]")
    assert_one_clear_error(proc, "kernels_src/sdpa_decode/spec.py: it has no check_row(knobs) "
                                 "(spec module sdpa_decode.spec of op 'sdpa_rdna_decode')")
    assert "define check_row(knobs) there" in proc.stderr


def test_case10_two_spec_modules_in_one_directory(project: Path) -> None:
    """sdpa_rdna4's spec_rdna4.py imports sdpa_rdna's spec.py: each breakage is named where it is."""
    line = appended_line(project, "sdpa_rdna/spec_rdna4.py", "x = (\n")
    assert farm(project, "plan", "ops=[sdpa_rdna]").returncode == 0
    assert_one_clear_error(farm(project, "plan", "ops=[sdpa_rdna4]"),
                           f"kernels_src/sdpa_rdna/spec_rdna4.py:{line}: SyntaxError: ")
    (project / "kernels_src/sdpa_rdna/spec_rdna4.py").write_text(
        (project / "kernels_src/sdpa_rdna/spec_rdna4.py").read_text().replace("x = (\n", ""))
    line = appended_line(project, "sdpa_rdna/spec.py", "undefined_name\n")
    assert farm(project, "plan", "ops=[sdpa_cdna]").returncode == 0
    for op in ("sdpa_rdna", "sdpa_rdna4"):
        assert_one_clear_error(farm(project, "plan", f"ops=[{op}]"),
                               f"kernels_src/sdpa_rdna/spec.py:{line}: NameError: name 'undefined_name' is not defined")


def test_case10_spec_output_does_not_corrupt_the_answers(project: Path) -> None:
    appended_line(project, "rmsnorm/spec.py", "print('{\"job\": 0, \"rows\": []}')\nimport os\nos.write(1, b'{x\\n')\n")
    proc = farm(project, "plan", "ops=[rmsnorm]", "targets=[gfx942]")
    assert proc.returncode == 0, proc.stderr
    assert '{"job": 0, "rows": []}' in proc.stderr  # what spec code prints still reaches the user


def test_case10_processes_spec_code_starts_are_ended(project: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "spawned.pid"
    appended_line(project, "rmsnorm/spec.py",
                  "import subprocess\n"
                  f"open({str(pid_file)!r}, 'w').write(str(subprocess.Popen(['sleep', '300']).pid))\n")
    proc = farm(project, "plan", "ops=[rmsnorm]", "targets=[gfx942]")
    pid = int(pid_file.read_text())
    try:
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pid), f"the sleep spec code started (pid {pid}) outlived the command"
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait a moment for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


# ---- the mechanism, directly --------------------------------------------------------------------


def write_spec(kernels: Path, family: str, body: str) -> None:
    (kernels / family).mkdir(parents=True, exist_ok=True)
    (kernels / family / "spec.py").write_text(body)


def test_check_rows_answers_per_row_and_keeps_going_after_a_broken_module(tmp_path: Path) -> None:
    write_spec(tmp_path, "good", "def check_row(knobs):\n    if knobs['n'] < 0:\n        raise ValueError('n < 0')\n")
    write_spec(tmp_path, "bad", "import json\njson.loads('{')\n")
    results = check_rows(tmp_path, [("good.spec", [{"n": 1}, {"n": -1}]), ("bad.spec", [{"n": 1}]),
                                    ("good.spec", [{"n": -2}])])
    assert results[0] == [None, "n < 0"] and results[2] == ["n < 0"]
    bad = results[1]
    assert isinstance(bad, SpecFailure) and bad.what.startswith("JSONDecodeError: ")
    assert bad.location(tmp_path) == "bad/spec.py:2"  # the spec's line, not the json module's


def test_check_rows_names_the_module_that_stopped_the_child(tmp_path: Path) -> None:
    write_spec(tmp_path, "good", "def check_row(knobs):\n    pass\n")
    write_spec(tmp_path, "slow", "import time\n\ndef check_row(knobs):\n    time.sleep(60)\n")
    started = time.monotonic()
    results = check_rows(tmp_path, [("good.spec", [{}]), ("slow.spec", [{}]), ("good.spec", [{}])], timeout_s=1)
    assert time.monotonic() - started < 20
    assert results[0] == [None]
    slow, later = results[1], results[2]
    assert isinstance(slow, SpecFailure) and slow.what == "spec code did not finish within 1 s"
    assert slow.location(tmp_path) == "slow/spec.py:4"
    assert isinstance(later, SpecFailure) and "stopped the run" in later.what


def test_a_kernel_family_named_like_a_standard_module(tmp_path: Path) -> None:
    """The child itself imports json: a family directory called `json` must still be its own."""
    write_spec(tmp_path, "json", "def check_row(knobs):\n    raise ValueError('mine')\n")
    (tmp_path / "json" / "__init__.py").write_text("")
    assert check_rows(tmp_path, [("json.spec", [{}])]) == [["mine"]]

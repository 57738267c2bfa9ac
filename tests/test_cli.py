"""The command line's conventions: help that runs nothing, --version, unknown flags and verbs refused with
the nearest spelling, -v/-q, and what a build reports on stderr when it is not a terminal."""

from __future__ import annotations

import io
import logging
import os
import re
import select
import time
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import REPO, run_farm

from farm.cli.verbs import VERBS
from farm.core.errors import FarmError
from farm.observe.progress import INTERVAL_ENV, BuildProgress, InFlight, Status, interval_s

VERB_NAMES = [verb.name for verb in VERBS]


def nowhere_env(tmp_path: Path) -> dict[str, str]:
    """FARM_PROJECT naming a directory with no conf/: any verb that loaded the config would fail."""
    return {"FARM_PROJECT": str(tmp_path / "no-project")}


@pytest.mark.parametrize("verb", VERB_NAMES)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_verb_help_prints_usage_and_runs_nothing(tmp_path: Path, verb: str, flag: str) -> None:
    """Before: `farm build --help` started a build and `farm check --help` ran a full check."""
    proc = run_farm(tmp_path, verb, flag, "ops=[rmsnorm]", env=nowhere_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: farm {verb} "), proc.stdout
    assert proc.stderr == ""
    assert list(tmp_path.iterdir()) == []  # no outputs/, no .farm/ reports, no lock


def test_help_lists_every_verb_and_help_verb_shows_one(tmp_path: Path) -> None:
    top = run_farm(tmp_path, "--help")
    assert top.returncode == 0 and top.stdout.startswith("usage: farm ")
    for verb in VERB_NAMES:
        assert re.search(rf"^  {verb}\b", top.stdout, re.MULTILINE), verb
    assert run_farm(tmp_path, "help").stdout == top.stdout
    one = run_farm(tmp_path, "help", "diff")
    assert one.returncode == 0 and one.stdout.startswith("usage: farm diff [-h] [-v | -q] [--json] A.hsaco B.hsaco")


def test_no_verb_prints_usage_and_exits_2(tmp_path: Path) -> None:
    proc = run_farm(tmp_path)
    assert proc.returncode == 2 and proc.stdout.startswith("usage: farm ")


def test_version_names_the_farm_and_the_pinned_flydsl(tmp_path: Path) -> None:
    pinned = yaml.safe_load((REPO / "conf" / "toolchain" / "pinned.yaml").read_text())["flydsl"]
    proc = run_farm(REPO, "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"farm {version('farm')}",
                                        f"flydsl {pinned} pinned, {version('flydsl')} installed"]
    # Outside a project the farm's version still prints; the pin is said to be unknown.
    away = run_farm(tmp_path, "--version", env=nowhere_env(tmp_path))
    assert away.returncode == 0 and away.stdout.startswith(f"farm {version('farm')}\nflydsl unknown (")


def refused_usage(proc, prog: str, *needles: str) -> str:  # noqa: ANN001 (CompletedProcess)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{prog}: error: ") and proc.stderr.count(": error: ") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.slow
def test_unknown_flag_is_named_with_the_accepted_ones(tmp_path: Path) -> None:
    """Before: `farm build --dry-run` ignored the flag and built."""
    env = nowhere_env(tmp_path)
    refused_usage(run_farm(tmp_path, "build", "--dry-run", "ops=[rmsnorm]", env=env), "farm build",
                  "unknown flag --dry-run", "fix: accepted flags: -v/--verbose, -q/--quiet, -h/--help")
    refused_usage(run_farm(tmp_path, "expand", "--chek", env=env), "farm expand",
                  "unknown flag --chek; did you mean '--check'?", "accepted flags: --check, -v/--verbose")
    # A flag another verb takes is still unknown here; a prefix of a flag is not that flag.
    refused_usage(run_farm(tmp_path, "check", "--json", env=env), "farm check", "unknown flag --json")
    refused_usage(run_farm(tmp_path, "expand", "--che", env=env), "farm expand", "unknown flag --che")
    assert list(tmp_path.iterdir()) == []


def test_misspelled_verb_gets_did_you_mean(tmp_path: Path) -> None:
    err = refused_usage(run_farm(tmp_path, "chekc"), "farm", "unknown verb 'chekc'; did you mean 'check'?")
    assert all(verb in err for verb in VERB_NAMES)  # the fix lists the verbs
    err = refused_usage(run_farm(tmp_path, "zzz"), "farm", "unknown verb 'zzz'")
    assert "did you mean" not in err


@pytest.mark.slow
def test_flags_and_words_in_any_order(small_project: Path) -> None:
    """Flags may stand before the verb, between words or after them; every word keeps its meaning."""
    outputs = []
    for args in (("-v", "plan", "targets=[gfx942]", "dtypes=[f32]"),
                 ("plan", "targets=[gfx942]", "-v", "dtypes=[f32]"),
                 ("plan", "targets=[gfx942]", "dtypes=[f32]", "--verbose")):
        proc = run_farm(small_project, *args)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    # The one f32 row of the small table on gfx942 (both overrides applied), then the summary. The session's
    # small project may have been built by an earlier test: the row is new or up to date, never anything else.
    lines = outputs[0].splitlines()
    status, key = lines[0].split()[:2]
    assert key == "rmsnorm/gfx942/rmsnorm_f32_infer_generic" and status in ("new", "up-to-date"), lines[0]
    assert lines[-1] == ("rows=1 up_to_date=0 to_build=1" if status == "new" else "rows=1 up_to_date=1 to_build=0")
    assert outputs[0] == outputs[1] == outputs[2]


def test_expand_check_flag_still_works(small_project: Path) -> None:
    proc = run_farm(small_project, "expand", "--check")
    assert proc.returncode == 0 and proc.stdout.strip() == "instances/ is up to date with conf/"


def test_errors_go_to_stderr_and_quiet_keeps_them(small_project: Path) -> None:
    for args in (("plan", "targets=[gfx1]"), ("-q", "plan", "targets=[gfx1]"), ("plan", "-q", "targets=[gfx1]")):
        proc = run_farm(small_project, *args)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("farm plan: error: ") and "\n  fix: " in proc.stderr, proc.stderr


# --------------------------------------------------------------------------------------------------
# Progress of a build (farm/observe/progress.py)

PROGRESS_LINE = re.compile(r"^progress: (\d+)/(\d+) rows, (\d+\.\d\d) rows/s, ETA (\S+ ?s?|unknown); (\d+) in flight"
                           r"(?:, slowest (\S+) \((\S+ ?s?)\))?$")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_in_flight_estimate_follows_submission_order_and_slots() -> None:
    flight = InFlight(["a", "b", "c", "d"], slots=2, now=0.0)
    assert len(flight) == 2 and flight.oldest(3.0) == ("a", 3.0)
    flight.finished("b", 5.0)  # c takes b's worker at t=5
    assert flight.oldest(8.0) == ("a", 8.0)
    flight.finished("a", 9.0)  # d starts at 9; c (since 5) is now the oldest
    assert len(flight) == 2 and flight.oldest(10.0) == ("c", 5.0)
    flight.finished("d", 11.0)
    flight.finished("c", 12.0)
    assert len(flight) == 0 and flight.oldest(13.0) is None


def test_a_row_back_before_its_turn_is_never_counted_in_flight() -> None:
    flight = InFlight(["a", "b", "c"], slots=1, now=0.0)
    flight.finished("c", 1.0)  # Ray ran c early
    flight.finished("a", 2.0)
    assert flight.oldest(4.0) == ("b", 2.0)
    flight.finished("b", 5.0)
    assert len(flight) == 0  # c is not started again


def test_progress_line_fields() -> None:
    status = Status(done=30, total=90, elapsed_s=20.0, in_flight=2, oldest=("rmsnorm/gfx942/x", 75.4))
    match = PROGRESS_LINE.match(status.line())
    assert match, status.line()
    assert match.groups() == ("30", "90", "1.50", "40 s", "2", "rmsnorm/gfx942/x", "1m15s")
    assert status.postfix() == "2 in flight, oldest rmsnorm/gfx942/x 1m15s"
    start = Status(done=0, total=5, elapsed_s=0.0, in_flight=0, oldest=None)
    assert start.line() == "progress: 0/5 rows, 0.00 rows/s, ETA unknown; 0 in flight"


class FakePool:
    def __init__(self, batches: list[list[str]]) -> None:
        self.batches = batches

    def completed_batches(self):  # noqa: ANN201
        for keys in self.batches:
            yield [SimpleNamespace(key=k) for k in keys]


def test_not_a_terminal_gets_periodic_lines(caplog: pytest.LogCaptureFixture) -> None:
    """The line's fields as the build goes (a short period stands in for the default 10 s)."""
    clock = Clock()
    caplog.set_level(logging.INFO, logger="farm.observe.progress")
    with BuildProgress(["r1", "r2", "r3"], slots=2, file=io.StringIO(), period_s=0.01, clock=clock) as progress:
        batches = progress.watch(FakePool([["r2"]])).completed_batches()
        clock.now += 4
        next(batches)
        progress.update(1)
        clock.now += 2  # r1 has run 6 s, r3 2 s
        seen = wait_for_line(caplog, "progress: 1/3")
        progress.write("FAILED r9: it broke")
    match = PROGRESS_LINE.match(seen)
    assert match, seen
    assert match.groups() == ("1", "3", "0.17", "12 s", "2", "r1", "6 s")
    assert [r.levelno for r in caplog.records if r.getMessage() == "FAILED r9: it broke"] == [logging.WARNING]


def wait_for_line(caplog: pytest.LogCaptureFixture, prefix: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]
        if lines:
            return lines[-1]
        time.sleep(0.01)
    raise AssertionError(f"no line starting {prefix!r}: {[r.getMessage() for r in caplog.records]}")


def test_quiet_shows_no_progress(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="farm.observe.progress")
    with BuildProgress(["r1"], slots=1, file=io.StringIO(), period_s=0.01) as progress:
        time.sleep(0.1)
        assert progress.bar is None
    assert not [r for r in caplog.records if r.getMessage().startswith("progress:")]


def test_terminal_bar_shows_the_rows_in_flight(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="farm.observe.progress")
    leader, follower = os.openpty()
    clock = Clock()
    try:
        with open(follower, "w", closefd=False) as tty:
            with BuildProgress(["r1", "r2", "r3"], slots=2, file=tty, period_s=60, clock=clock) as progress:
                clock.now += 7
                next(progress.watch(FakePool([["r1"]])).completed_batches())
                progress.update(1)
            tty.flush()
            shown = read_pending(leader)  # the bar as it closed
    finally:
        os.close(leader)
        os.close(follower)
    assert "compiling" in shown and "1/3" in shown
    assert "2 in flight, oldest r2 7 s" in shown, shown
    assert not [r for r in caplog.records if r.getMessage().startswith("progress:")]  # the bar, not lines


def read_pending(fd: int) -> str:
    """Everything written so far to a pty: one read may return only the first chunk, because the kernel
    hands pty output to the reader in pieces (a single read failed this test once on a busy CI machine)."""
    chunks = []
    while select.select([fd], [], [], 0.5)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_progress_interval_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert interval_s() == 10.0
    monkeypatch.setenv(INTERVAL_ENV, "0.5")
    assert interval_s() == 0.5
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        with pytest.raises(FarmError, match=f"{INTERVAL_ENV}='{bad}' is not a positive number of seconds"):
            interval_s()


@pytest.mark.slow
def test_build_not_on_a_terminal_prints_progress_lines(small_project: Path, tmp_path: Path) -> None:
    """A real build with stderr captured (a pipe): progress lines with every field, for the one row."""
    row = "rmsnorm/gfx942/rmsnorm_f32_infer_generic"
    proc = run_farm(small_project, "build", "targets=[gfx942]", "dtypes=[f32]", f"outputs_dir={tmp_path / 'out'}",
                    env={INTERVAL_ENV: "0.05"}, driver_env=True)  # the interval is the driver's
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("progress: ")]
    assert lines, proc.stderr
    for line in lines:
        match = PROGRESS_LINE.match(line)
        assert match, line
        done, total, in_flight, slowest = match.group(1, 2, 5, 6)
        # compiling; back and being verified; written
        assert total == "1" and (done, in_flight, slowest) in (("0", "1", row), ("0", "0", None), ("1", "0", None))
    assert PROGRESS_LINE.match(lines[0]).group(1, 5, 6) == ("0", "1", row)  # the compile outlasts 50 ms
    assert "compiling:" not in proc.stderr  # no bar when stderr is not a terminal
    assert (tmp_path / "out" / row).with_suffix(".hsaco").is_file()

"""The command line's conventions: help that runs nothing, --version, unknown flags and verbs refused with
the nearest spelling, -v/-q, and what a build reports on stderr when it is not a terminal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_farm

from farm.cli.verbs import VERBS

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
    from importlib.metadata import version

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


def test_flags_and_words_in_any_order(small_project: Path) -> None:
    """Flags may stand before the verb, between words or after them; every word keeps its meaning."""
    outputs = []
    for args in (("-v", "plan", "targets=[gfx942]", "dtypes=[f32]"),
                 ("plan", "targets=[gfx942]", "-v", "dtypes=[f32]"),
                 ("plan", "targets=[gfx942]", "dtypes=[f32]", "--verbose")):
        proc = run_farm(small_project, *args)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    # The one f32 row of the small table on gfx942 (both overrides applied), then the summary.
    assert outputs[0].splitlines()[0].split()[:2] == ["new", "rmsnorm/gfx942/rmsnorm_f32_infer_generic"]
    assert outputs[0].splitlines()[-1] == "rows=1 up_to_date=0 to_build=1"
    assert outputs[0] == outputs[1] == outputs[2]


def test_expand_check_flag_still_works(small_project: Path) -> None:
    proc = run_farm(small_project, "expand", "--check")
    assert proc.returncode == 0 and proc.stdout.strip() == "instances/ is up to date with conf/"


def test_errors_go_to_stderr_and_quiet_keeps_them(small_project: Path) -> None:
    for args in (("plan", "targets=[gfx1]"), ("-q", "plan", "targets=[gfx1]"), ("plan", "-q", "targets=[gfx1]")):
        proc = run_farm(small_project, *args)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("farm plan: error: ") and "\n  fix: " in proc.stderr, proc.stderr

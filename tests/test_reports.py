"""Build reports say what they belong to (command, output tree, git commit and dirty flag), only the newest
`report_keep` per output tree are kept, and a build with nothing to do adds none."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, on_shared_cluster, on_shared_ray, run_farm, small_copy, small_expanded_copy

pytestmark = pytest.mark.slow

ROW = "rmsnorm_bf16_train_n2560"
SEL = ("targets=[gfx942]", f"names=[{ROW}]")


def _git(project: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, text=True).stdout


def _reports(project: Path) -> list[Path]:
    return sorted(p for p in (project / ".farm" / "reports").glob("build-*.json") if not p.name.endswith(".trace.json"))


def test_reports_record_their_origin_and_only_the_newest_are_kept(tmp_path: Path) -> None:
    project = small_expanded_copy(tmp_path / "p")
    (project / ".gitignore").write_text("/outputs/\n/.farm/\n/.outputs.lock\n")
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "sources")
    commit = _git(project, "rev-parse", "HEAD").strip()

    run_farm(project, "build", *SEL, "report_keep=2", check=True)
    report = json.loads(_reports(project)[-1].read_text())
    ran = on_shared_cluster(project, ("build", *SEL, "report_keep=2"), None)  # the words the build was given
    assert report["command"] == f"farm {' '.join(ran)}"
    assert report["outputs_dir"] == str((project / "outputs").resolve())
    assert report["git_commit"] == commit and report["git_dirty"] is False

    obj = project / "outputs" / "rmsnorm" / "gfx942" / f"{ROW}.hsaco"
    (project / "kernels_src" / "NOTES.txt").write_text("an untracked file makes the checkout dirty\n")
    for _ in range(2):
        obj.unlink()
        run_farm(project, "build", *SEL, "report_keep=2", check=True)
    reports = _reports(project)
    assert len(reports) == 2  # three builds, the newest two kept (with their timelines)
    assert all(p.with_name(p.stem + ".trace.json").is_file() for p in reports)
    assert len(list((project / ".farm" / "reports").glob("build-*.trace.json"))) == 2
    assert json.loads(reports[-1].read_text())["git_dirty"] is True

    # A build of another output tree keeps its own reports, apart from this tree's.
    run_farm(project, "build", *SEL, f"outputs_dir={tmp_path / 'other'}", "report_keep=2", check=True)
    assert set(reports) <= set(_reports(project)) and len(_reports(project)) == 3

    # Nothing to do: no report.
    before = _reports(project)
    proc = run_farm(project, "build", *SEL, "report_keep=2", check=True)
    assert "report: none (nothing to do)" in proc.stderr and _reports(project) == before


def test_report_has_the_drivers_cost_and_phases_and_the_trace_its_lane(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "p")  # with its own farm package: a verifier file is edited below
    shutil.copytree(REPO / "farm", project / "farm", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONPATH": str(project)}
    run_farm(project, "expand", env=env, check=True)
    # Fresh workers on the session's Ray cluster, which run this project's farm package (Ray's runtime_env).
    proc = run_farm(project, "build", *SEL, *on_shared_ray(), env=env, check=True)
    assert "ms CPU per row over 1 rows" in proc.stderr  # the one driver line
    report = json.loads(_reports(project)[-1].read_text())
    driver = report["driver"]
    assert driver["rows"] == 1 and driver["cpu_seconds"] > 0
    assert abs(driver["ms_per_row"] - driver["cpu_seconds"] * 1000 / driver["rows"]) < 1e-2
    assert set(driver["breakdown"]) == {"verify", "write", "ray", "threads", "other"}
    assert abs(sum(driver["breakdown"].values()) - driver["cpu_seconds"]) < 1e-4
    assert driver["disassembler_cpu_seconds"] > 0  # the disassembler ran, counted apart
    [row] = report["rows"]
    names = [p["name"] for p in row["phases"]]
    assert names[-3:] == ["ray_return", "verify", "write"] and len(names) > 3  # the worker's first
    starts = [p["start_unix"] for p in row["phases"]]
    assert starts == sorted(starts) and all(p["seconds"] >= 0 for p in row["phases"])
    trace = json.loads((project / ".farm" / "reports" / "latest-build.trace.json").read_text())["traceEvents"]
    driver_pid = next(e["pid"] for e in trace if e["ph"] == "M" and e["args"].get("name") == "driver")
    work = {e["name"] for e in trace if e["ph"] == "X" and e["pid"] == driver_pid and e.get("cat") == "driver"}
    assert {"ray submit", "ray results", "disassemble", "accept", "write", "flush"} <= work
    phases = [e for e in trace if e["ph"] == "X" and e.get("cat") == "phase"]
    assert {e["name"] for e in phases if e["pid"] == driver_pid} == {"ray_return", "verify", "write"}
    assert {e["name"] for e in phases if e["pid"] != driver_pid} == set(names[:-3])

    # Re-verified rows get the driver's verify and write phases too.
    verify = project / "farm" / "verify" / "rules.py"
    verify.write_text(verify.read_text() + '\n"""An edit that re-verifies."""\n')
    run_farm(project, "build", *SEL, *on_shared_ray(), env=env, check=True)
    report = json.loads(_reports(project)[-1].read_text())
    assert [r["reverified"] for r in report["rows"]] == [True]
    assert [p["name"] for p in report["rows"][0]["phases"]] == ["verify", "write"]
    assert report["driver"]["rows"] == 1

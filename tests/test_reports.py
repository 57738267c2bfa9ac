"""Build reports say what they belong to (command, output tree, git commit and dirty flag), only the newest
`report_keep` per output tree are kept, and a build with nothing to do adds none."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import run_farm, small_copy

ROW = "rmsnorm_bf16_train_n2560"
SEL = ("targets=[gfx942]", f"names=[{ROW}]")


def _git(project: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, text=True).stdout


def _reports(project: Path) -> list[Path]:
    return sorted(p for p in (project / ".farm" / "reports").glob("build-*.json") if not p.name.endswith(".trace.json"))


def test_reports_record_their_origin_and_only_the_newest_are_kept(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "p")
    run_farm(project, "expand", check=True)
    (project / ".gitignore").write_text("/outputs/\n/.farm/\n/.outputs.lock\n")
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "sources")
    commit = _git(project, "rev-parse", "HEAD").strip()

    run_farm(project, "build", *SEL, "report_keep=2", check=True)
    report = json.loads(_reports(project)[-1].read_text())
    assert report["command"] == f"farm build {' '.join(SEL)} report_keep=2"
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

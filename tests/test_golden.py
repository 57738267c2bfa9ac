"""Golden digests: `farm golden` records outputs.sha256 from a complete, clean tree; coreutils verify it;
`farm check` names every object whose bytes differ from the committed digests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import built_copy, last_line, run_farm

import farm
from farm.assure.golden_code import stale


def test_golden_digests_are_recorded_and_verified_by_sha256sum(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    proc = run_farm(project, "golden")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    golden = project / "outputs.sha256"
    lines = golden.read_text().splitlines()
    files = sorted(p.relative_to(project / "outputs").as_posix() for p in (project / "outputs").rglob("*")
                   if p.is_file())
    assert [line.split("  ", 1)[1] for line in lines] == files  # every file, sorted, relative to outputs/
    coreutils = subprocess.run(["sha256sum", "-c", "--quiet", "../outputs.sha256"], cwd=project / "outputs",
                               capture_output=True, text=True)
    assert coreutils.returncode == 0, coreutils.stdout + coreutils.stderr
    assert run_farm(project, "check").returncode == 0
    # With it, the farm code its manifests record: each file's hash, as this checkout has it.
    code = project / "outputs.code.sha256"
    assert "farm/worker/zygote.py" in code.read_text() and "farm/acceptance.py" in code.read_text()
    assert stale(code, Path(farm.__file__).resolve().parents[1]) == []
    # The DVC pointer of the same tree is written with it.
    assert "outs:" in (project / "outputs.dvc").read_text() and "wrote outputs.dvc: md5" in proc.stdout


def test_check_names_an_object_whose_bytes_differ_from_the_committed_digest(built: Path, tmp_path: Path) -> None:
    """The tree is self-consistent (manifest and object agree), but git says other bytes: check names it."""
    project = built_copy(built, tmp_path / "p")
    run_farm(project, "golden", check=True)
    golden = project / "outputs.sha256"
    rel = "rmsnorm/gfx942/rmsnorm_bf16_train_n2560.hsaco"
    text = golden.read_text()
    line = next(x for x in text.splitlines() if x.endswith(rel))
    golden.write_text(text.replace(line, "0" * 64 + "  " + rel))
    check = run_farm(project, "check")
    assert check.returncode == 1
    assert f"{rel}: bytes differ from the committed golden digest in outputs.sha256" in check.stdout
    assert last_line(check.stdout).endswith("1 problem(s)")


def test_golden_refuses_an_incomplete_tree_and_a_malformed_file(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    (project / "outputs" / "rmsnorm" / "gfx942" / "rmsnorm_bf16_train_n2560.hsaco").unlink()
    proc = run_farm(project, "golden")
    assert proc.returncode == 1 and "refusing to record golden digests" in proc.stdout
    assert not (project / "outputs.sha256").exists()
    (project / "outputs.sha256").write_text("0" * 64 + "  ../../etc/passwd\n")
    check = run_farm(project, "check")
    assert check.returncode == 2 and "outputs.sha256:1: not a `sha256sum` line" in check.stderr
    assert "Traceback" not in check.stderr


def test_golden_refuses_a_partial_selection(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    proc = run_farm(project, "golden", "targets=[gfx942]")
    assert proc.returncode == 2 and "whole table" in proc.stderr

"""The remote cache (farm/restore/): after `rm -rf outputs`, `farm build` fetches every row whose published
object is current from the DVC cache or remote instead of compiling it, verified like a fresh compile.
One small build (gfx942, 6 objects) is pushed to a local remote once and cloned without its outputs."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import built_one_target_copy, latest_report, run_farm, stop_cluster

from farm.assure import audit as audit_mod
from farm.cli.selection import load, selected_rows
from farm.core.private import private_dir
from farm.execute import standing_files
from farm.observe.progress import BuildProgress

SEL = "targets=[gfx942]"
TARGET_DIR = "rmsnorm/gfx942"
ONE = "rmsnorm_f32_infer_generic"


def tree_bytes(outputs: Path) -> dict[str, bytes]:
    return {p.relative_to(outputs).as_posix(): p.read_bytes() for p in sorted(outputs.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def published(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small table built for gfx942 (the session's build, cut down to that target) and pushed to the
    default local remote (.farm/dvc-remote)."""
    project = built_one_target_copy(built, tmp_path_factory.mktemp("cache-src"), "gfx942")
    run_farm(project, "push", "--partial", SEL, check=True)  # one directory of a table of many
    return project


def clone(src: Path, dest: Path, remote: Path | None = None) -> tuple[Path, str]:
    """A checkout as git carries it (sources, table, pointer, committed DVC config): no outputs/, no DVC
    cache. Returns it and the override that reaches `remote` (default: the source's own remote)."""
    for name in ("conf", "kernels_src", "instances"):
        shutil.copytree(src / name, dest / name)
    for name in ("outputs.dvc", ".dvcignore", ".dvc/config", ".dvc/.gitignore"):
        if (src / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dest / name)
    return dest, f"remote.url={remote or src / '.farm' / 'dvc-remote'}"


def blob_path(src: Path, remote: Path, relpath: str) -> Path:
    """Where the local remote keeps outputs/<relpath> (md5 from the pointer's listing in the DVC cache)."""
    md5 = re.search(r"md5: (\w+)\.dir", (src / "outputs.dvc").read_text()).group(1)
    listing = json.loads((src / ".dvc/cache/files/md5" / md5[:2] / (md5[2:] + ".dir")).read_text())
    blob = next(e["md5"] for e in listing if e["relpath"] == relpath)
    return remote / "files" / "md5" / blob[:2] / blob[2:]


@pytest.mark.slow
def test_rows_come_back_from_the_remote_identical_and_none_compiles(published: Path, tmp_path: Path) -> None:
    project, remote = clone(published, tmp_path / "p")
    # With auto-start on (CI=false): a build that restores every row needs no compiler and starts none.
    try:
        proc = run_farm(project, "build", SEL, remote, env={"CI": "false"})
        started = standing_files.starting(project) or standing_files.running(project) is not None
    finally:
        stop_cluster(project)
    assert proc.returncode == 0, proc.stderr
    assert "compiled 0, restored 6, failed 0, up to date 0" in proc.stderr
    assert "started a standing cluster" not in proc.stderr and not started
    assert "restored 6 of 6 rows from outputs.dvc" in proc.stderr
    # Objects, manifest.json and SOURCE.md: the same bytes as the build that was published.
    assert tree_bytes(project / "outputs") == tree_bytes(published / "outputs")
    report = latest_report(project)
    assert report["built"] == 0 and report["restored"] == 6
    assert all(r["restored"] and r["written"] for r in report["rows"])
    assert run_farm(project, "check", SEL).returncode == 0
    again = run_farm(project, "build", SEL, remote)
    assert "built 0, failed 0, up to date 6" in again.stderr


@pytest.mark.slow
def test_a_corrupted_blob_is_refused_and_its_row_compiles(published: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    shutil.copytree(published / ".farm" / "dvc-remote", remote)
    victim = f"{TARGET_DIR}/{ONE}.hsaco"
    blob = blob_path(published, remote, victim)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    project, remote_arg = clone(published, tmp_path / "p", remote)
    proc = run_farm(project, "build", SEL, remote_arg)
    assert proc.returncode == 0, proc.stderr
    refused = [line for line in proc.stderr.splitlines() if "REFUSED cached" in line]
    assert len(refused) == 1 and f"outputs/{victim}" in refused[0], proc.stderr
    assert "compiled 1, restored 5, failed 0" in proc.stderr
    assert tree_bytes(project / "outputs") == tree_bytes(published / "outputs")


@pytest.mark.slow
def test_a_stale_cached_entry_compiles(published: Path, tmp_path: Path) -> None:
    project, remote = clone(published, tmp_path / "p")
    entry = json.loads((published / "outputs" / TARGET_DIR / "manifest.json").read_text())["objects"][0]
    changed = project / "kernels_src" / sorted(entry["inputs"]["sources"])[0]  # a source every row read
    changed.write_text(changed.read_text() + "\n# changed after publishing\n")
    proc = run_farm(project, "build", SEL, f"names=[{ONE}]", remote)
    assert proc.returncode == 0, proc.stderr
    assert "compiled 1, restored 0, failed 0" in proc.stderr


@pytest.mark.slow
def test_a_remote_that_holds_nothing_yet_compiles_every_row_with_one_line(published: Path, tmp_path: Path) -> None:
    """A fresh clone: outputs.dvc in git, its default remote an empty or absent directory. The build compiles
    and says why in one line (it once failed with DVC's traceback)."""
    for remote in (tmp_path / "absent", tmp_path / "empty"):
        if remote.name == "empty":
            remote.mkdir()
        project, remote_arg = clone(published, tmp_path / f"p-{remote.name}", remote)
        proc = run_farm(project, "build", SEL, f"names=[{ONE}]", remote_arg)
        assert proc.returncode == 0, proc.stderr
        said = [line for line in proc.stderr.splitlines() if line.startswith("restore:")]
        assert len(said) == 1 and "nothing published there yet" in said[0], proc.stderr
        assert "Traceback" not in proc.stderr and "built 1, failed 0" in proc.stderr
        assert latest_report(project)["restored"] == 0


@pytest.mark.slow
def test_rows_the_published_tree_cannot_hold_compile_without_opening_dvc(published: Path, tmp_path: Path) -> None:
    """A width added since publishing: the first build lists the published directory through DVC and the
    farm remembers its file names per pointer (farm/restore/published.py); the next build of a new row does
    not import DVC at all. A published row still comes back through DVC, and a record that is wrong or
    garbage costs a compile or DVC's opening, never other bytes."""
    project, remote = clone(published, tmp_path / "p")
    record = private_dir("published") / f"{hashlib.sha256((project / 'outputs.dvc').read_bytes()).hexdigest()}.json"
    record.unlink(missing_ok=True)  # other tests of this module may have listed the same pointer
    op = project / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text().replace("n: [2560, 16384]", "n: [2560, 3072, 16384]"))
    run_farm(project, "expand", check=True)
    first = run_farm(project, "build", SEL, remote)
    assert "compiled 2, restored 6, failed 0" in first.stderr, first.stderr
    listed = sorted(p.name for p in (published / "outputs" / TARGET_DIR).iterdir())
    assert json.loads(record.read_text())[TARGET_DIR] == listed
    where = project / "outputs" / TARGET_DIR
    new = where / "rmsnorm_bf16_train_n3072.hsaco"
    new_bytes = new.read_bytes()
    new.unlink()
    second = run_farm(project, "build", SEL, remote, env={"PYTHONPROFILEIMPORTTIME": "1"},
                      driver_env=True)  # the build process's own imports; its row goes to the session's cluster
    assert "compiled 1, restored 0, failed 0" in second.stderr, second.stderr
    assert "has none of them (its file list, as an earlier build read it)" in second.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in second.stderr.splitlines()
                if line.startswith("import time:")}
    # DVC's filesystem (what opening the repository needs) is never imported; its exception types are.
    assert "farm.restore.stage" in imported and not {"dvc.api", "dvc.fs", "dvc_data.index"} & imported
    assert new.read_bytes() == new_bytes
    # A checkout without outputs/: its published rows are in the remembered listing, so DVC is opened.
    other, _ = clone(published, tmp_path / "q")
    assert "compiled 0, restored 6, failed 0" in run_farm(other, "build", SEL, remote).stderr
    # A record that says the published directory holds nothing: its rows compile instead, the same bytes.
    record.write_text(json.dumps({TARGET_DIR: []}))
    shutil.rmtree(other / "outputs")
    assert "compiled 1, restored 0, failed 0" in run_farm(other, "build", SEL, f"names=[{ONE}]", remote).stderr
    assert tree_bytes(other / "outputs" / TARGET_DIR)[f"{ONE}.hsaco"] == \
        tree_bytes(published / "outputs" / TARGET_DIR)[f"{ONE}.hsaco"]
    # Garbage: ignored; DVC is opened and the rows come back.
    record.write_text("{not json")
    shutil.rmtree(other / "outputs")
    assert "compiled 0, restored 6, failed 0" in run_farm(other, "build", SEL, remote).stderr
    assert tree_bytes(other / "outputs") == tree_bytes(published / "outputs")


@pytest.mark.slow
def test_restore_off_compiles(published: Path, tmp_path: Path) -> None:
    project, remote = clone(published, tmp_path / "p")
    proc = run_farm(project, "build", SEL, f"names=[{ONE}]", remote, "cache.restore=false")
    assert proc.returncode == 0, proc.stderr
    assert "built 1, failed 0" in proc.stderr and "restored" not in proc.stderr
    assert latest_report(project)["restored"] == 0
    bad = run_farm(project, "build", SEL, remote, "cache.restore=maybe")
    assert bad.returncode == 2 and "cache.restore='maybe' is not true or false" in bad.stderr


@pytest.mark.slow
def test_audit_compiles_for_real(published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project, remote = clone(published, tmp_path / "p")
    run_farm(project, "build", SEL, remote, check=True)  # the audited tree: restored from the remote
    rebuilds: list[dict] = []
    real_run = subprocess.run

    def keep_rebuild_report(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        proc = real_run(command, **kwargs)
        reports = next(a.split("=", 1)[1] for a in command if a.startswith("report_dir="))
        rebuilds.append(json.loads((Path(reports) / "latest-build.json").read_text()))
        return proc

    monkeypatch.setenv("FARM_PROJECT", str(project))
    monkeypatch.setattr(audit_mod.subprocess, "run", keep_rebuild_report)
    words = [SEL, f"names=[{ONE}]", remote]
    cfg = load(words)
    rows, every = selected_rows(cfg)
    out = io.StringIO()
    assert audit_mod.audit(cfg, rows, every, words, out=out) == 0, out.getvalue()
    assert len(rebuilds) == 1 and rebuilds[0]["built"] == 1 and rebuilds[0]["restored"] == 0


def test_the_progress_line_says_restored_and_left_to_compile() -> None:
    clock = iter([0.0, 2.0])
    progress = BuildProgress(["a", "b", "c", "d"], 1, io.StringIO(), period_s=60, clock=lambda: next(clock),
                             phase="restoring")
    progress.update(3, restored=2)
    line = progress.status().line()
    assert line == "progress: restoring 3/4 rows: 2 restored, 1 to compile; 1.50 rows/s, ETA 1 s"

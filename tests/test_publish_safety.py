"""farm pull / push / status never lose data (issue 37): a pull changes outputs/ only once the published listing
and every blob it names are in hand and verified; a push publishes less than the whole table only when told
(`--partial`), never drops the golden lines of directories it did not build, and leaves outputs.dvc,
outputs.sha256 and outputs.code.sha256 as they were when it fails. Errors are one short line: a count, the
first few paths (all of them with -v), no terminal colour codes.

The project is the session's small build (rmsnorm, every target) in a table of many ops: a partial tree."""

from __future__ import annotations

import hashlib
import re
import shutil
import socket
from pathlib import Path

import pytest
from conftest import REPO, built_copy, last_line, run_farm

pytestmark = pytest.mark.slow

PARTIAL = "--partial"
TARGET_DIR = "rmsnorm/gfx942"
THREE = ("outputs.dvc", "outputs.sha256", "outputs.code.sha256")


def tree_bytes(outputs: Path) -> dict[str, bytes]:
    return {p.relative_to(outputs).as_posix(): p.read_bytes() for p in sorted(outputs.rglob("*")) if p.is_file()}


def three(project: Path) -> dict[str, bytes | None]:
    return {name: (project / name).read_bytes() if (project / name).is_file() else None for name in THREE}


def farm_lines(stderr: str, verb: str) -> list[str]:
    """The farm's own lines about `verb` (with -v, each starts with the name of the module that said it)."""
    return [line[line.index(f"farm {verb}: "):] for line in stderr.splitlines() if f"farm {verb}: " in line]


def unpublished_pointer(project: Path) -> None:
    """A pointer whose listing no cache or remote of this project holds: the checkout's committed one (a
    fresh clone whose tree was pushed elsewhere, or a pointer git brought back after a push)."""
    shutil.copy(REPO / "outputs.dvc", project / "outputs.dvc")


def unpublished_listing() -> str:
    """The name of the listing the committed pointer names (its md5 changes whenever the goldens are recorded)."""
    [md5] = re.findall(r"md5: ([0-9a-f]{32}\.dir)", (REPO / "outputs.dvc").read_text())
    return md5


def published(built: Path, dest: Path) -> Path:
    project = built_copy(built, dest)
    proc = run_farm(project, "push", PARTIAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return project


def test_pull_with_nothing_published_changes_nothing(built: Path, tmp_path: Path) -> None:
    """Before: status said `UNKNOWN ... fix: farm pull`, pull refused with a 128 KB list of every file, and
    `farm pull --force` (what that refusal advised) failed and deleted outputs/."""
    project = built_copy(built, tmp_path / "p")
    unpublished_pointer(project)
    before = tree_bytes(project / "outputs")

    status = run_farm(project, "status")
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout.startswith("NOT PUBLISHED: neither the local DVC cache nor ")
    assert "fix: `farm pull" not in status.stdout and "UNKNOWN" not in status.stdout
    assert last_line(status.stdout).endswith(f"nothing of outputs.dvc is published at {project / '.farm/dvc-remote'}")

    for flags in ([], ["--force"]):
        proc = run_farm(project, "pull", *flags)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        [line] = farm_lines(proc.stderr, "pull")
        assert line.startswith("farm pull: nothing to pull: neither the local DVC cache")
        assert "outputs/ was left as it was" in line and "fix: " in line
        assert len(proc.stderr) < 1000 and "\x1b[" not in proc.stderr  # short, and no terminal colour codes
        assert tree_bytes(project / "outputs") == before


def test_pull_of_an_older_pointer_whose_listing_is_gone_keeps_the_pushed_tree(built: Path, tmp_path: Path) -> None:
    """Before: `farm push`, then `git checkout outputs.dvc` (a pointer whose listing is not in the cache), then
    `farm pull` removed every object (the bytes were still in .dvc/cache) and said nothing of it."""
    project = published(built, tmp_path / "p")
    before = tree_bytes(project / "outputs")
    unpublished_pointer(project)
    proc = run_farm(project, "pull")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = farm_lines(proc.stderr, "pull")
    listing = unpublished_listing()
    assert "nothing to pull" in line and listing in line, listing
    assert tree_bytes(project / "outputs") == before


def test_pull_with_a_blob_missing_everywhere_changes_nothing(built: Path, tmp_path: Path) -> None:
    project = published(built, tmp_path / "p")
    where = project / "outputs" / TARGET_DIR
    victim = "rmsnorm_bf16_train_n2560.hsaco"
    blob = project / ".dvc" / "cache" / "files" / "md5"
    md5 = hashlib.md5((where / victim).read_bytes(), usedforsecurity=False).hexdigest()
    for store in (blob, project / ".farm" / "dvc-remote" / "files" / "md5"):
        (store / md5[:2] / md5[2:]).unlink()
    for name in ("rmsnorm_f32_infer_generic.hsaco", victim):  # to come back with the pull
        (where / name).unlink()
    before = tree_bytes(project / "outputs")
    proc = run_farm(project, "pull", "--force")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = farm_lines(proc.stderr, "pull")
    assert line.startswith("farm pull: 1 of 40 files of outputs.dvc are in neither the local DVC cache")
    assert f"outputs/{TARGET_DIR}/{victim} (blob {project / '.farm/dvc-remote/files/md5'}/{md5[:2]}/{md5[2:]})" in line
    assert tree_bytes(project / "outputs") == before  # not even the object that is in hand was checked out


def test_pull_names_local_changes_in_short_and_force_replaces_them(built: Path, tmp_path: Path) -> None:
    """Before: the refusal listed every file on one line (128 KB for the whole table)."""
    project = published(built, tmp_path / "p")
    published_tree = tree_bytes(project / "outputs")
    where = project / "outputs" / TARGET_DIR
    for path in sorted(where.iterdir()):
        path.write_bytes(path.read_bytes() + b"local change")
    for n in range(3):
        (where / f"extra{n}.hsaco").write_bytes(b"built here, never pushed")
    changed = tree_bytes(project / "outputs")

    proc = run_farm(project, "pull")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = farm_lines(proc.stderr, "pull")
    assert line.startswith("farm pull: 11 local files in outputs/ are in no DVC cache")
    assert line.count(f"outputs/{TARGET_DIR}/") == 5 and "and 6 more (-v lists all)" in line
    assert "`farm pull --force`" in line and "\x1b[" not in line
    assert tree_bytes(project / "outputs") == changed
    proc = run_farm(project, "pull", "-v")
    [line] = farm_lines(proc.stderr, "pull")
    assert line.count(f"outputs/{TARGET_DIR}/") == 11 and "more" not in line

    proc = run_farm(project, "pull", "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert tree_bytes(project / "outputs") == published_tree


def test_push_from_a_partial_tree_needs_partial_and_keeps_the_golden_lines_it_lacks(built: Path,
                                                                                   tmp_path: Path) -> None:
    """Before: a push from a tree holding part of the table exited 0 and rewrote outputs.sha256 with only the
    tree's files (1,453-row table, 639 built: 842 golden lines lost) and outputs.dvc with only its listing."""
    project = built_copy(built, tmp_path / "p")
    kept = [f"{'a' * 64}  rmsnorm_bwd/gfx90a/manifest.json", f"{'b' * 64}  sdpa_cdna/gfx942/sdpa_cdna_x.hsaco"]
    stale = f"{'c' * 64}  {TARGET_DIR}/rmsnorm_gone_n1.hsaco"  # a directory the tree has: its lines are replaced
    golden = project / "outputs.sha256"
    golden.write_text("".join(f"{x}\n" for x in sorted([*kept, stale], key=lambda x: x[66:])))
    before = three(project)

    proc = run_farm(project, "push")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refusal = last_line(proc.stdout)
    assert refusal.startswith("refusing to publish: outputs/ lacks ") and "(-v lists all)" in refusal
    assert f"`farm push {PARTIAL} ops=[rmsnorm]`" in refusal  # the small project selects rmsnorm
    assert three(project) == before

    proc = run_farm(project, "push", PARTIAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = next(x for x in proc.stdout.splitlines() if x.startswith(f"partial publication ({PARTIAL}): "))
    assert "outputs.dvc lists 5 of the table's " in said and "outputs.sha256 keeps the 2 golden lines" in said
    lines = golden.read_text().splitlines()
    assert [x for x in lines if not x[66:].startswith("rmsnorm/")] == kept  # byte for byte
    files = tree_bytes(project / "outputs")
    assert sorted(x[66:] for x in lines if x[66:].startswith("rmsnorm/")) == sorted(files)  # stale line gone
    assert f"nfiles: {len(files)}" in (project / "outputs.dvc").read_text()


def test_a_failed_push_leaves_the_three_files_as_they_were(built: Path, tmp_path: Path) -> None:
    """Before: a push whose upload failed had already rewritten outputs.dvc, outputs.sha256 and
    outputs.code.sha256."""
    project = published(built, tmp_path / "p")
    shutil.rmtree(project / "outputs" / "rmsnorm" / "gfx90a")  # a push would now record another tree
    before = three(project)
    assert all(before.values())
    (project / "a-file").write_text("not a directory\n")
    proc = run_farm(project, "push", PARTIAL, f"remote.url={project / 'a-file' / 'remote'}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = farm_lines(proc.stderr, "push")
    assert "failed (nothing is published; outputs.dvc, outputs.sha256 and outputs.code.sha256 were left" in line
    assert three(project) == before

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    none = str(tmp_path / "no-aws")
    proc = run_farm(project, "push", PARTIAL, "remote=s3", "remote.url=s3://bucket/p",
                    f"remote.endpointurl=http://127.0.0.1:{port}",
                    env={"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "farm-test-secret",
                         "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_CONFIG_FILE": none,
                         "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(farm_lines(proc.stderr, "push")) == 1 and "Traceback" not in proc.stderr
    assert three(project) == before

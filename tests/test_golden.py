"""Golden digests: `farm golden` records outputs.sha256 from a complete, clean tree; coreutils verify it;
`farm check` names every object whose bytes differ from the committed digests."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import built_copy, last_line, run_farm, shrink_op

import farm
from farm.assure.golden_code import stale

pytestmark = pytest.mark.slow


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
    assert "farm/worker/zygote.py" in code.read_text() and "farm/verify/accept.py" in code.read_text()
    assert stale(code, Path(farm.__file__).resolve().parents[1]) == []
    # The DVC pointer describes the whole outputs/: the small project's tree is one op of a table of many, so
    # the pointer is left (there was none), and one line says why and what to run.
    assert not (project / "outputs.dvc").exists()
    left = last_line(proc.stdout)
    assert left.startswith("left outputs.dvc as it was: outputs/ is not the whole table (")
    assert "`farm build ops=[" in left


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
    assert last_line(check.stdout).endswith(": 1 problem")


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


# ------------------------------------------------------------------ farm golden ops=[A,B]: the lines of A and B only

SMALL_BWD_GROUPS = """groups:
  - name: baked
    name_format: 'rmsnorm_bwd_{dtype}_n{n}'
    targets: [gfx942]
    axes:
      dtype: [bf16, f16]
      n: [2560]
      n_max: [0]
"""
OTHER_LINES = [  # lines of ops not selected below: kept byte for byte, whether or not conf/op/ has the op
    f"{'a' * 64}  sdpa_cdna/gfx942/sdpa_cdna_x.hsaco",
    f"{'b' * 64}  sdpa_cdna/gfx942/manifest.json",
    f"{'c' * 64}  zzz_gone/gfx90a/SOURCE.md",
]
STALE_MINE = f"{'d' * 64}  rmsnorm/gfx942/rmsnorm_gone_n1.hsaco"  # a selected op's line the tree no longer has
EXTRA_CODE = f"{'e' * 64}  farm/cli/app.py"  # a farm file only the other ops' manifests record (here: made up)


@pytest.fixture(scope="module")
def two_ops(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built small project plus a small rmsnorm_bwd (2 rows, gfx942): two whole ops built, every other
    op of the table not built."""
    project = built_copy(built, tmp_path_factory.mktemp("two-ops"))
    shrink_op(project, "rmsnorm_bwd", SMALL_BWD_GROUPS)
    run_farm(project, "expand", "ops=[rmsnorm_bwd]", check=True)
    run_farm(project, "build", "ops=[rmsnorm_bwd]", check=True)
    return project


def tree_lines(outputs: Path, *ops: str) -> list[str]:
    return sorted(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(outputs).as_posix()}"
                  for op in ops for p in (outputs / op).rglob("*") if p.is_file())


def recorded(project: Path, *ops: str) -> dict[str, str]:
    """The farm files the manifests of `ops` record, as outputs.code.sha256 lists them."""
    from farm.assure.golden_code import recorded_code
    from farm.table.config import load as load_config

    cfg = load_config(project, [])
    return recorded_code(cfg, sorted({(op, p.parent.name) for op in ops
                                      for p in (cfg.outputs_dir / op).glob("*/manifest.json")}))


def test_golden_of_some_ops_replaces_their_lines_and_keeps_every_other_one(two_ops: Path, tmp_path: Path) -> None:
    """Before: `ops=[rmsnorm_bwd,rmsnorm]` was refused as "a part of" the table (the rows compared as lists, in
    another order), and `ops=[rmsnorm,rmsnorm_bwd]` rewrote outputs.sha256 with only those ops' files."""
    project = built_copy(two_ops, tmp_path / "p")
    golden, code = project / "outputs.sha256", project / "outputs.code.sha256"
    golden_before = "".join(f"{line}\n" for line in sorted([*OTHER_LINES, STALE_MINE], key=lambda x: x[66:]))
    from farm.assure.golden_code import render as render_code

    mine = render_code(recorded(project, "rmsnorm", "rmsnorm_bwd")).splitlines(keepends=True)
    code_before = "".join(sorted([*mine, EXTRA_CODE + "\n"], key=lambda x: x[66:]))
    written = []
    for ops in ("ops=[rmsnorm_bwd,rmsnorm]", "ops=[rmsnorm,rmsnorm_bwd]"):
        golden.write_text(golden_before)
        code.write_text(code_before)
        proc = run_farm(project, "golden", ops)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = golden.read_text().splitlines()
        assert [x for x in lines if not x[66:].startswith(("rmsnorm/", "rmsnorm_bwd/"))] == sorted(
            OTHER_LINES, key=lambda x: x[66:])  # byte for byte, in the file's order
        assert sorted(x for x in lines if x[66:].startswith(("rmsnorm/", "rmsnorm_bwd/"))) == tree_lines(
            project / "outputs", "rmsnorm", "rmsnorm_bwd")  # exactly the files of the two ops: the stale line gone
        assert EXTRA_CODE in code.read_text().splitlines()  # the other ops' farm files are kept too
        assert "kept the 3 lines of other ops as they were" in proc.stdout
        # The tree is not the whole table (the other ops are not built): the pointer is left, in one line.
        assert not (project / "outputs.dvc").exists()
        assert last_line(proc.stdout).startswith("left outputs.dvc as it was: outputs/ is not the whole table")
        written.append((golden.read_bytes(), code.read_bytes()))
    assert written[0] == written[1]  # the order of the list does not matter
    assert run_farm(project, "check", "ops=[rmsnorm,rmsnorm_bwd]").returncode == 0


def test_golden_of_some_ops_refuses_when_the_kept_lines_were_made_with_other_farm_code(two_ops: Path,
                                                                                      tmp_path: Path) -> None:
    project = built_copy(two_ops, tmp_path / "p")
    from farm.assure.golden_code import render as render_code

    code = recorded(project, "rmsnorm")
    clash = sorted(code)[0]
    code[clash] = "0" * 64  # what the other ops' golden lines were made with
    golden, code_file = project / "outputs.sha256", project / "outputs.code.sha256"
    golden.write_text("".join(f"{line}\n" for line in OTHER_LINES))
    code_file.write_text(render_code(code))
    before = golden.read_bytes(), code_file.read_bytes()
    proc = run_farm(project, "golden", "ops=[rmsnorm]")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"farm/{clash}" in proc.stdout and "cannot describe both" in proc.stdout
    assert (golden.read_bytes(), code_file.read_bytes()) == before


def test_golden_writes_the_pointer_only_from_the_whole_table_exactly_as_recorded(two_ops: Path,
                                                                                 tmp_path: Path) -> None:
    """With the table reduced to the two built ops, the tree is whole: a golden of both writes outputs.dvc and
    drops the lines of ops conf/op/ no longer has. A golden of one op leaves the pointer when another op's
    files differ from their kept lines, or when a directory of the table is missing."""
    project = built_copy(two_ops, tmp_path / "p")
    for path in [*(project / "conf" / "op").glob("*.yaml"), *(project / "instances").glob("*.jsonl")]:
        if path.stem not in ("rmsnorm", "rmsnorm_bwd"):
            path.unlink()
    golden, pointer = project / "outputs.sha256", project / "outputs.dvc"
    golden.write_text("".join(f"{line}\n" for line in OTHER_LINES))
    proc = run_farm(project, "golden", "ops=[rmsnorm,rmsnorm_bwd]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dropped the lines of ops conf/op/ no longer has: sdpa_cdna, zzz_gone" in proc.stdout
    files = tree_lines(project / "outputs", "rmsnorm", "rmsnorm_bwd")
    assert sorted(golden.read_text().splitlines()) == files
    assert last_line(proc.stdout).startswith("wrote outputs.dvc: md5 ")
    assert f"nfiles: {len(files)}" in pointer.read_text()
    written = pointer.read_bytes()

    # Another op's file no longer what its (kept) line says: outputs.dvc would not describe outputs.sha256's tree.
    text = golden.read_text()
    victim = "rmsnorm_bwd/gfx942/rmsnorm_bwd_f16_n2560.hsaco"
    golden.write_text("".join(f"{'0' * 64}  {victim}\n" if x.endswith(f"  {victim}") else f"{x}\n"
                              for x in text.splitlines()))
    proc = run_farm(project, "golden", "ops=[rmsnorm]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_line(proc.stdout).startswith(
        f"left outputs.dvc as it was: 1 files of outputs/ differ from outputs.sha256 or have no line in it: {victim};")
    assert pointer.read_bytes() == written and f"{'0' * 64}  {victim}" in golden.read_text()

    shutil.rmtree(project / "outputs" / "rmsnorm_bwd")
    proc = run_farm(project, "golden", "ops=[rmsnorm]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_line(proc.stdout).startswith("left outputs.dvc as it was: outputs/ is not the whole table (1 of its "
                                             "6 directories have no object here: rmsnorm_bwd/gfx942)")
    assert pointer.read_bytes() == written

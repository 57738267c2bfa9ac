"""`farm check` on a tree that holds part of the table: a row never built is NOT BUILT (one line per
directory, exit 0; exit 1 with --complete), never DRIFT; golden digests are compared object by object, and a
directory's manifest.json and SOURCE.md only when the directory holds every row of its table.

Before: every selected row never built was a DRIFT line ("has no entry in manifest.json", "manifest.json:
missing (... never built)"), a partial directory's manifest and SOURCE.md were DRIFT against the golden
digests of the complete one, and the exit status was 1 on a tree nobody had touched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import SMALL_ROWS_PER_TARGET, built_copy, last_line, run_farm

pytestmark = pytest.mark.slow

BUILT = {"gfx942": 3, "gfx90a": SMALL_ROWS_PER_TARGET}  # rows built per target: gfx942 in part, gfx90a whole
ABSENT = ("gfx11-generic", "gfx12-generic", "gfx950")  # the other targets of rmsnorm: nothing built
UNBUILT = 5 * SMALL_ROWS_PER_TARGET - sum(BUILT.values())
OBJECT = "rmsnorm/gfx942/rmsnorm_bf16_train_n2560.hsaco"


@pytest.fixture(scope="module")
def partial(built: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(project, tree): the small project with golden digests recorded from its complete tree, and a second
    tree `part/` beside them built in part (gfx942's bf16 rows, gfx90a whole), with those digests as its own
    (`part.sha256`: paths are relative to the tree)."""
    base = tmp_path_factory.mktemp("partial")
    project = built_copy(built, base / "p")
    run_farm(project, "golden", check=True)
    tree = base / "part"
    run_farm(project, "build", "targets=[gfx942]", "dtypes=[bf16]", f"outputs_dir={tree}", check=True)
    run_farm(project, "build", "targets=[gfx90a]", f"outputs_dir={tree}", check=True)
    assert len(list((tree / "rmsnorm" / "gfx942").glob("*.hsaco"))) == BUILT["gfx942"]
    shutil.copy(project / "outputs.sha256", base / "part.sha256")
    return project, tree


def copy_tree(partial: tuple[Path, Path], tmp_path: Path) -> Path:
    """A private copy of the partial tree and its golden digests, to damage."""
    tree = tmp_path / "part"
    shutil.copytree(partial[1], tree)
    shutil.copy(partial[1].parent / "part.sha256", tmp_path / "part.sha256")
    return tree


def lines(stdout: str, prefix: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(prefix)]


def test_a_built_selection_of_a_partial_directory_checks_clean(partial: tuple[Path, Path]) -> None:
    project, tree = partial
    check = run_farm(project, "check", "targets=[gfx942]", "dtypes=[bf16]", f"outputs_dir={tree}")
    assert check.returncode == 0, check.stdout + check.stderr
    assert not lines(check.stdout, "DRIFT") and not lines(check.stdout, "NOT BUILT"), check.stdout
    assert last_line(check.stdout) == (
        "checked 3 objects and 1 manifest in 1 directory against the build record and the golden digests in "
        "part.sha256 (objects only, in 1 incomplete directory): no drift")


def test_the_whole_check_of_a_partial_tree_warns_once_per_directory_and_exits_0(partial: tuple[Path, Path]) -> None:
    project, tree = partial
    check = run_farm(project, "check", f"outputs_dir={tree}")
    assert check.returncode == 0, check.stdout + check.stderr
    assert not lines(check.stdout, "DRIFT"), check.stdout
    where = tree / "rmsnorm"
    assert lines(check.stdout, "NOT BUILT") == [
        f"NOT BUILT {where / 'gfx11-generic'}/: no such directory; {SMALL_ROWS_PER_TARGET} selected rows would be here",
        f"NOT BUILT {where / 'gfx12-generic'}/: no such directory; {SMALL_ROWS_PER_TARGET} selected rows would be here",
        f"NOT BUILT {where / 'gfx942'}/: 3 of its {SMALL_ROWS_PER_TARGET} selected rows have no object and no "
        "manifest entry (-v lists them)",
        f"NOT BUILT {where / 'gfx950'}/: no such directory; {SMALL_ROWS_PER_TARGET} selected rows would be here",
    ]
    assert last_line(check.stdout) == (
        f"checked {sum(BUILT.values())} objects and 2 manifests in 2 directories against the build record and the "
        "golden digests in part.sha256 (objects only, in 1 incomplete directory): no drift; "
        f"{UNBUILT} rows not built: `farm build ops=[rmsnorm] targets=[{','.join(sorted([*ABSENT, 'gfx942']))}] "
        f"outputs_dir={tree}` builds them")
    # -v names the rows of the partial directory, one line each (only those: an absent directory stays one line).
    verbose = run_farm(project, "-v", "check", f"outputs_dir={tree}")
    assert verbose.returncode == 0
    listed = [line.strip() for line in verbose.stdout.splitlines() if line.startswith("  ")]
    names = ("f16_f32gamma_train_n16384", "f16_f32gamma_train_n2560", "f32_infer_generic")
    assert sorted(listed) == [str(tree / "rmsnorm" / "gfx942" / f"rmsnorm_{name}.hsaco") for name in names]


def test_complete_makes_rows_not_built_exit_1(partial: tuple[Path, Path]) -> None:
    project, tree = partial
    check = run_farm(project, "check", "--complete", f"outputs_dir={tree}")
    assert check.returncode == 1, check.stdout + check.stderr
    assert not lines(check.stdout, "DRIFT") and len(lines(check.stdout, "NOT BUILT")) == 4, check.stdout
    assert f"no drift; {UNBUILT} rows not built (--complete: every selected row must be built)" in last_line(
        check.stdout)
    # What is built is complete for that selection: --complete passes there.
    assert run_farm(project, "check", "--complete", "targets=[gfx90a]", f"outputs_dir={tree}").returncode == 0


def test_one_byte_appended_to_one_object_of_a_partial_tree_is_one_drift_line(partial: tuple[Path, Path],
                                                                             tmp_path: Path) -> None:
    project, _ = partial
    tree = copy_tree(partial, tmp_path)
    with (tree / OBJECT).open("ab") as f:
        f.write(b"\0")
    check = run_farm(project, "check", f"outputs_dir={tree}")
    assert check.returncode == 1
    assert lines(check.stdout, "DRIFT") == [
        f"DRIFT {tree / OBJECT}: SHA256/size differ from manifest.json (object tampered or manifest edited); bytes "
        "differ from the committed golden digest in part.sha256; fix: `farm build ops=[rmsnorm] targets=[gfx942] "
        f"names=[rmsnorm_bf16_train_n2560] outputs_dir={tree}`"]
    assert ": 1 problem; " in last_line(check.stdout)


def test_a_complete_directory_s_manifest_is_still_compared_with_its_golden_digest(partial: tuple[Path, Path],
                                                                                  tmp_path: Path) -> None:
    """The golden lines of both directories' manifest.json are made wrong: gfx90a holds its whole table, so its
    manifest is DRIFT; gfx942 holds part of it, so its manifest is not the one the digests record."""
    project, _ = partial
    tree = copy_tree(partial, tmp_path)
    golden = tmp_path / "part.sha256"
    text = golden.read_text()
    for target in ("gfx90a", "gfx942"):
        line = next(x for x in text.splitlines() if x.endswith(f"  rmsnorm/{target}/manifest.json"))
        text = text.replace(line, "0" * 64 + line[64:])
    golden.write_text(text)
    check = run_farm(project, "check", f"outputs_dir={tree}")
    assert check.returncode == 1
    assert lines(check.stdout, "DRIFT") == [
        f"DRIFT {tree / 'rmsnorm' / 'gfx90a' / 'manifest.json'}: bytes differ from the committed golden digest in "
        "part.sha256"]

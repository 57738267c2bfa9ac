"""outputs.code.sha256: the farm code the committed golden digests were made with (farm/assure/golden_code.py).
Editing a file the manifests record (the compile's or the verifier's code) changes every manifest a build
writes; this names it in seconds instead of after a full rebuild."""

from __future__ import annotations

from pathlib import Path

from farm.assure.golden_code import stale

PROJECT = Path(__file__).resolve().parents[1]


def test_the_golden_digests_were_made_with_the_farm_code_checked_out() -> None:
    problems = stale(PROJECT / "outputs.code.sha256", PROJECT)
    assert not problems, ("the committed golden digests (outputs.sha256) were recorded with other farm code: "
                          + "; ".join(problems) + ". Rebuild every row from nothing (`rm -rf outputs && farm build "
                          "cache.restore=false`), run `farm golden`, and commit outputs.sha256, outputs.code.sha256 "
                          "and outputs.dvc")


def _project(tmp_path: Path) -> Path:
    (tmp_path / "farm" / "worker").mkdir(parents=True)
    (tmp_path / "farm" / "worker" / "zygote.py").write_text("print('v1')\n")
    (tmp_path / "farm" / "build.py").write_text("x = 1\n")
    return tmp_path


def _line(project: Path, rel: str) -> str:
    import hashlib
    return f"{hashlib.sha256((project / rel).read_bytes()).hexdigest()}  {rel}\n"


def test_a_changed_or_gone_file_is_named(tmp_path: Path) -> None:
    project = _project(tmp_path)
    record = project / "outputs.code.sha256"
    record.write_text(_line(project, "farm/build.py") + _line(project, "farm/worker/zygote.py"))
    assert stale(record, project) == []
    (project / "farm" / "worker" / "zygote.py").write_text("print('v2')\n")
    (project / "farm" / "build.py").unlink()
    assert stale(record, project) == [
        "farm/build.py: recorded by the golden digests, gone from the checkout",
        "farm/worker/zygote.py: changed since the golden digests were recorded",
    ]


def test_a_line_naming_anything_but_a_farm_file_is_refused_unread(tmp_path: Path) -> None:
    project = _project(tmp_path)
    secret = tmp_path.parent / f"{tmp_path.name}-secret.py"
    secret.write_text("never read\n")
    record = project / "outputs.code.sha256"
    record.write_text("".join(f"{'0' * 64}  {path}\n" for path in (
        f"farm/../../{secret.name}", str(secret), "kernels_src/x.py", "farm/build.txt")) + "not a line\n")
    problems = stale(record, project)
    assert len(problems) == 5 and all("not a `sha256sum` line for a farm file" in p for p in problems), problems

"""End to end on real compiles for all five targets: build, verify, reproduce, no-op, check."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import SMALL_ROWS_PER_TARGET, last_line, on_shared_ray, run_farm

from farm.elf.code_object import read_code_object

pytestmark = pytest.mark.slow

EXPECTED_MACHINE = {"gfx90a": 0x03F, "gfx942": 0x04C, "gfx950": 0x04F, "gfx11-generic": 0x054, "gfx12-generic": 0x059}
TARGETS = sorted(EXPECTED_MACHINE)


def tree_bytes(outputs: Path) -> dict[str, bytes]:
    return {p.relative_to(outputs).as_posix(): p.read_bytes() for p in sorted(outputs.rglob("*")) if p.is_file()}


def test_every_target_built_and_verified(built: Path) -> None:
    out = built / "outputs" / "rmsnorm"
    assert sorted(p.name for p in out.iterdir()) == TARGETS
    for target in TARGETS:
        manifest = json.loads((out / target / "manifest.json").read_text())
        assert manifest["toolchain"]["flydsl"] == "0.3.4"
        assert len(manifest["objects"]) == SMALL_ROWS_PER_TARGET
        for entry in manifest["objects"]:
            co = read_code_object((out / target / entry["file"]).read_bytes())
            assert co.mach == EXPECTED_MACHINE[target]
            assert co.generic_version == (1 if target.endswith("generic") else 0)
            assert co.amdhsa_target.endswith(target)
            assert [k[".name"] for k in co.kernels] == ["rmsnorm_fwd_0"]
            kernel = entry["kernels"][0]
            assert kernel["scratch_bytes"] == 0 and kernel["vgpr_spill_count"] == 0
            assert kernel["wavefront_size"] == (32 if target.endswith("generic") else 64)
            assert kernel["args"] and kernel["kernarg_segment_size"] > 0
            assert entry["code_object"]["linker"] == "Linker: LLD 22.1.8"
            # Instruction classes from the pinned disassembler: a norm loads, computes and stores, with no matrix ops.
            classes = kernel["instructions"]
            assert classes["vmem"] > 0 and classes["valu"] > 0 and classes["mfma"] == classes["wmma"] == 0
            assert entry["code_object"]["instructions"] == classes  # one kernel: the object's totals are its own
        assert "rmsnorm for " + target in (out / target / "SOURCE.md").read_text()
    check = run_farm(built, "check")
    assert check.returncode == 0, check.stdout
    assert last_line(check.stdout) == (f"checked {5 * SMALL_ROWS_PER_TARGET} objects and 5 manifests in 5 directories "
                                       "against the build record (outputs.sha256 not recorded yet: `farm golden`): "
                                       "no drift")


def test_build_report_and_timeline(built: Path) -> None:
    """Per row: compile seconds, worker, toolchain, peak memory, warnings; a Chrome trace, one lane per worker."""
    reports = sorted((built / ".farm" / "reports").glob("build-*[0-9].json"))
    path = next(p for p in reports if json.loads(p.read_text())["built"] == 5 * SMALL_ROWS_PER_TARGET)
    rows = json.loads(path.read_text())["rows"]
    workers = {r["worker"] for r in rows}
    for r in rows:
        assert r["ok"] and r["written"] and 0 < r["compile_seconds"] <= r["seconds"]
        assert r["worker"].startswith(r["node"] + " pid ") and r["node"].split("/")[1] == "127.0.0.1"
        assert r["toolchain"]["flydsl"] == "0.3.4" and r["toolchain"]["linker"]["version"] == "LLD 22.1.8"
        assert r["max_rss_mib"] > 50 and r["warnings"] == []
    # Each worker paid the warm-up (imports) once, on its first row, and never again.
    assert sorted(r["worker"] for r in rows if r["warmup_seconds"] > 0) == sorted(workers)
    trace = json.loads(path.with_name(path.stem + ".trace.json").read_text())["traceEvents"]
    # One span per row on its worker's lane (its phases nest inside it); pid 0 is the driver's own process.
    spans = [e for e in trace if e["ph"] == "X" and e["cat"] == "compile"]
    assert sorted(e["name"] for e in spans) == sorted(r["key"] for r in rows)
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)
    lanes = {(e["pid"], e["tid"]) for e in trace if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] != 0}
    assert lanes == {(e["pid"], e["tid"]) for e in spans} and len(lanes) == len(workers)
    phases = [e for e in trace if e["ph"] == "X" and e["cat"] == "phase" and e["pid"] != 0]
    assert {e["name"] for e in phases} >= {"front_end", "mlir_passes", "codegen", "link"}


def test_noop_build_compiles_nothing(built: Path) -> None:
    before = tree_bytes(built / "outputs")
    plan = run_farm(built, "plan")
    assert last_line(plan.stdout) == f"rows={5 * SMALL_ROWS_PER_TARGET} up_to_date=30 to_build=0"
    reports = sorted((built / ".farm" / "reports").iterdir())
    proc = run_farm(built, "build")
    assert proc.returncode == 0
    assert "built 0, failed 0, up to date 30" in proc.stderr and "report: none (nothing to do)" in proc.stderr
    assert sorted((built / ".farm" / "reports").iterdir()) == reports  # a no-op build adds no report
    assert tree_bytes(built / "outputs") == before
    # Nothing to compile: Ray (~0.7 s to import) is never imported.
    timed = run_farm(built, "build", env={"PYTHONPROFILEIMPORTTIME": "1"}, check=True)
    imported = {line.rsplit("|", 1)[1].strip() for line in timed.stderr.splitlines() if line.startswith("import time:")}
    assert "farm.build" in imported and "ray" not in imported


def test_build_selection_and_outputs_dir(built: Path, tmp_path: Path) -> None:
    out3 = tmp_path / "out3"
    proc = run_farm(built, "build", "targets=[gfx950]", "dtypes=[f32]", f"outputs_dir={out3}", check=True)
    assert "rows=1 up_to_date=0 to_build=1" in proc.stderr
    files = sorted(p.relative_to(out3).as_posix() for p in out3.rglob("*.hsaco"))
    assert files == ["rmsnorm/gfx950/rmsnorm_f32_infer_generic.hsaco"]
    assert (out3 / "rmsnorm/gfx950/rmsnorm_f32_infer_generic.hsaco").read_bytes() == (
        built / "outputs/rmsnorm/gfx950/rmsnorm_f32_infer_generic.hsaco").read_bytes()


@pytest.fixture()
def clone(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built project, free to tamper with."""
    dest = tmp_path / "clone"
    shutil.copytree(built, dest, ignore=shutil.ignore_patterns(".farm"))
    return dest


def _object(project: Path, target: str = "gfx942") -> Path:
    return sorted((project / "outputs" / "rmsnorm" / target).glob("*.hsaco"))[0]


def test_check_catches_tampered_object(clone: Path) -> None:
    obj = _object(clone)
    data = bytearray(obj.read_bytes())
    co = read_code_object(bytes(data))
    text_offset = bytes(data).find(co.sections[".text"][:64])
    data[text_offset + 16] ^= 0xFF
    obj.write_bytes(bytes(data))
    proc = run_farm(clone, "check")
    assert proc.returncode == 1
    assert f"DRIFT {obj}: SHA256/size differ" in proc.stdout
    plan = run_farm(clone, "plan")
    assert f"tampered        rmsnorm/gfx942/{obj.stem}" in plan.stdout


def test_check_catches_edited_manifest(clone: Path) -> None:
    mpath = clone / "outputs" / "rmsnorm" / "gfx90a" / "manifest.json"
    data = json.loads(mpath.read_text())
    data["objects"][0]["kernels"][0]["vgpr_count"] += 1
    mpath.write_text(json.dumps(data, sort_keys=True, indent=2) + "\n")
    proc = run_farm(clone, "check")
    assert proc.returncode == 1
    assert f"{data['objects'][0]['file']}: manifest 'kernels' does not match the object" in proc.stdout


def test_check_catches_reformatted_manifest(clone: Path) -> None:
    mpath = clone / "outputs" / "rmsnorm" / "gfx950" / "manifest.json"
    mpath.write_text(json.dumps(json.loads(mpath.read_text())))
    proc = run_farm(clone, "check")
    assert proc.returncode == 1 and f"DRIFT {mpath}: edited by hand" in proc.stdout


def test_check_catches_edited_kernel_source(clone: Path) -> None:
    src = clone / "kernels_src" / "rmsnorm" / "rmsnorm_fwd.py"
    src.write_text(src.read_text() + "\n# an edit\n")
    proc = run_farm(clone, "check")
    assert proc.returncode == 1
    assert "input drift: source kernels_src/rmsnorm/rmsnorm_fwd.py changed since it was built" in proc.stdout
    plan = run_farm(clone, "plan")
    assert last_line(plan.stdout) == "rows=30 up_to_date=0 to_build=30"


def test_check_catches_missing_and_stray_files(clone: Path) -> None:
    obj = _object(clone, "gfx12-generic")
    obj.unlink()
    stray = clone / "outputs" / "rmsnorm" / "gfx12-generic" / "extra.hsaco"
    stray.write_bytes(b"x")
    proc = run_farm(clone, "check")
    assert proc.returncode == 1
    assert f"DRIFT {obj}: missing" in proc.stdout
    assert f"DRIFT {stray}: file not recorded" in proc.stdout


def test_wrong_toolchain_refuses_to_build(clone: Path) -> None:
    pin = clone / "conf" / "toolchain" / "pinned.yaml"
    pin.write_text(pin.read_text().replace("version: LLD 22.1.8", "version: LLD 19.1.7"))
    obj = _object(clone)
    before = obj.read_bytes()
    proc = run_farm(clone, "build")
    assert proc.returncode == 2
    assert "linker.version: pinned 'LLD 19.1.7', found 'LLD 22.1.8'" in proc.stderr
    assert "farm pin" in proc.stderr
    assert obj.read_bytes() == before
    check = run_farm(clone, "check")
    assert "'toolchain' block differs from the config" in check.stdout


def test_wrong_toolchain_removes_nothing(clone: Path) -> None:
    """The toolchain check runs beside the build's first steps (farm/toolchain/beside.py); a build whose
    toolchain is not the pinned one still deletes, writes and records nothing: not the object of a row
    dropped from the table, not the object of a row it would rebuild."""
    op = clone / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text().replace("n: [2560, 16384]", "n: [2560]"))
    run_farm(clone, "expand", check=True)
    where = clone / "outputs" / "rmsnorm" / "gfx942"
    dropped = where / "rmsnorm_bf16_train_n16384.hsaco"
    rebuilt = where / "rmsnorm_bf16_train_n2560.hsaco"
    assert dropped.is_file()
    rebuilt.unlink()
    manifest_before = (where / "manifest.json").read_bytes()
    pin = clone / "conf" / "toolchain" / "pinned.yaml"
    pin.write_text(pin.read_text().replace("version: LLD 22.1.8", "version: LLD 19.1.7"))
    proc = run_farm(clone, "build")
    assert proc.returncode == 2, proc.stderr
    assert "linker.version: pinned 'LLD 19.1.7', found 'LLD 22.1.8'" in proc.stderr
    assert "removed " not in proc.stderr
    assert dropped.is_file() and not rebuilt.exists()
    assert (where / "manifest.json").read_bytes() == manifest_before


def test_interrupted_write_leftovers_are_cleaned(clone: Path) -> None:
    where = clone / "outputs" / "rmsnorm" / "gfx942"
    dead = subprocess.Popen(["true"])
    dead.wait()  # a writer that is gone: its temporary file is a leftover
    leftover = where / f".rmsnorm_bf16_train_n2560.hsaco.{dead.pid}.0123456789abcdef.tmp"
    leftover.write_bytes(b"half")
    obj = _object(clone)
    obj.unlink()
    proc = run_farm(clone, "build", check=True)
    assert "rows=30 up_to_date=29 to_build=1" in proc.stderr
    assert not leftover.exists() and obj.is_file()
    assert run_farm(clone, "check").returncode == 0


def test_warm_forked_compiles_match_fresh_processes(built: Path, tmp_path: Path) -> None:
    """The warm path (a fork of a server that imported torch and flydsl once) gives the same bytes
    as a fresh interpreter per row, on every target: one row each (a fresh interpreter imports torch and
    FlyDSL for every row, seconds of CPU each, so not the whole small table; tests/test_instructions.py
    compares one row of every attention family the same way)."""
    out = tmp_path / "fresh"
    names = ["rmsnorm_bf16_train_n2560"]
    run_farm(built, "build", f"outputs_dir={out}", f"names=[{','.join(names)}]", "executor.warm=false",
             *on_shared_ray(), check=True)  # fresh actors on the session's Ray cluster: no Ray start of its own
    fresh = {k: v for k, v in tree_bytes(out).items() if k.endswith(".hsaco")}
    warm = {k: v for k, v in tree_bytes(built / "outputs").items() if k.split("/")[-1][:-6] in names}
    assert len(fresh) == len(TARGETS) and fresh == warm

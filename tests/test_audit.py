"""farm audit: a varied rebuild proves the bytes, or names what differs and why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import built_copy, last_line, run_farm, write_lld19_toolchain

from farm.assure.audit import sample_rows
from farm.elf.code_object import read_code_object
from farm.table.config import load as load_config
from farm.table.expand import fresh_rows

pytestmark = pytest.mark.slow


@pytest.fixture()
def project(built: Path, tmp_path: Path) -> Path:
    return built_copy(built, tmp_path / "p")


def audit_report(project: Path) -> dict:
    return json.loads((project / ".farm" / "reports" / "latest-audit.json").read_text())


def test_audit_of_a_fresh_build_is_identical_under_every_variation(project: Path) -> None:
    """Also the guard that a rebuild elsewhere is byte-identical (it replaced test_build's own rebuild): the
    audit's `farm build` runs from another working directory (FARM_PROJECT), into an empty outputs_dir, with
    another HOME, TMPDIR, locale, time zone, hash seed, umask, worker count and row order, and stray variables
    (FLYDSL_DEBUG_ENABLE_DEBUG_INFO=1 among them); every object, manifest.json and SOURCE.md must be the same."""
    outputs_before = {p: p.read_bytes() for p in (project / "outputs").rglob("*") if p.is_file()}
    # The caller's own stray variables reach the rebuild too (the audit adds its variations on top).
    proc = run_farm(project, "audit", env={"TZ": "UTC", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
                                           "FLYDSL_DEBUG_ENABLE_DEBUG_INFO": "1", "UNRELATED_VARIABLE": "x"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "audit: 30 identical, 0 differ; manifests: 10 identical, 0 differ" in proc.stdout
    report = audit_report(project)
    assert all(report["variations"].values()) and len(report["variations"]) == 10
    seen = report["rebuild_conditions"]
    # Each variation really reached the rebuild's driver.
    assert seen["cwd"] != str(project) and " " in seen["cwd"]
    assert seen["tmpdir"] != "/tmp" and seen["home"] != os.environ.get("HOME")
    assert (seen["lang"], seen["tz"], seen["umask"], seen["hash_seed"]) == ("C", "Pacific/Chatham", "0077", "4242")
    assert seen["row_order"] == "reversed" and seen["workers"] == (os.cpu_count() or 1) + 1
    assert seen["env_noise"] == ["ARCH", "FARM_AUDIT_NOISE", "FLYDSL_GPU_ARCH", "ROCM_PATH"]
    assert {p: p.read_bytes() for p in (project / "outputs").rglob("*") if p.is_file()} == outputs_before


def test_variations_can_be_turned_off_by_name(project: Path) -> None:
    proc = run_farm(project, "audit", "audit.sample=3", "audit.vary.umask=false", "audit.vary.workers=false")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "audit: 3 identical, 0 differ" in proc.stdout
    report = audit_report(project)
    # The sample is deterministic: the rows whose keys hash lowest, whatever order the table lists them in
    # (it replaced a test that ran two audits to compare their samples).
    rows, _ = fresh_rows(load_config(project, []))
    chosen = [r.key for r in sample_rows(rows, 3)]
    assert [o["key"] for o in report["objects"]] == chosen == [r.key for r in sample_rows(rows[::-1], 3)]
    assert report["variations"]["umask"] is False and report["variations"]["workers"] is False
    assert report["rebuild_conditions"]["umask"] != "0077"
    bad = run_farm(project, "audit", "audit.vary.umsak=false")
    assert bad.returncode == 2
    assert "unknown option 'audit.vary.umsak' in overrides; did you mean 'audit.vary.umask'?" in bad.stderr


def test_a_tampered_object_and_a_hand_edited_manifest_are_reported(project: Path) -> None:
    """One audit of two directories: an object with a flipped .text bit is named with its section and offset, a
    manifest with an edited field with the field (its objects themselves are identical)."""
    obj = project / "outputs" / "rmsnorm" / "gfx90a" / "rmsnorm_f32_infer_generic.hsaco"
    data = bytearray(obj.read_bytes())
    text = read_code_object(bytes(data)).sections[".text"]
    data[bytes(data).find(text[:64]) + 8] ^= 0x01
    obj.write_bytes(bytes(data))
    mpath = project / "outputs" / "rmsnorm" / "gfx942" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["objects"][1]["kernels"][0]["vgpr_count"] = 7
    mpath.write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    proc = run_farm(project, "audit", "targets=[gfx90a,gfx942]")
    assert proc.returncode == 1
    file = manifest["objects"][1]["file"]
    assert "DIFFERS rmsnorm/gfx90a/rmsnorm_f32_infer_generic: differs: .text differs from offset 0x8" in proc.stdout
    assert f"DIFFERS rmsnorm/gfx942/manifest.json: differs: {file}: kernels[0].vgpr_count: 7 vs" in proc.stdout
    assert sum(line.startswith("DIFFERS") for line in proc.stdout.splitlines()) == 2, proc.stdout
    assert "audit: 11 identical, 1 differ" in proc.stdout


def test_a_different_linker_is_named_as_the_reason(project: Path) -> None:
    write_lld19_toolchain(project, "lld19")
    proc = run_farm(project, "audit", "toolchain=lld19", "targets=[gfx11-generic]")
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if line.startswith("DIFFERS rmsnorm/gfx11-generic/rmsnorm_")]
    assert len(lines) == 6
    assert all("linker differs (.comment: 'Linker: LLD 22.1.8' vs 'Linker: Debian LLD 19.1.7')" in ln for ln in lines)
    assert "DIFFERS rmsnorm/gfx11-generic/manifest.json: differs: toolchain.linker" in proc.stdout
    assert last_line(proc.stdout).startswith("audit: 0 identical, 6 differ")

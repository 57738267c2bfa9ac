"""Instruction classes from the pinned LLVM disassembler: recorded per object and per kernel,
required per op (MFMA on CDNA attention, WMMA on RDNA), recomputed by `farm check`."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO, copy_project, last_line, on_shared_ray, run_farm

from farm.core.private import private_dir
from farm.toolchain import disasm, listing
from farm.toolchain.disasm import count_files, count_many
from farm.toolchain.listing import CLASS_NAMES, classify, parse_listing

# One real row of every attention family (op, target, object name or None for its first row, class).
ATTENTION_ROWS = [
    ("sdpa_cdna", "gfx942", "sdpa_bf16_d64_c0_m128n64w4", "mfma"),
    ("sdpa_cdna_dualwave", "gfx950", None, "mfma"),
    ("sdpa_cdna_decode", "gfx90a", "sdpa_cdna_decode_bf16_d128_causal_c128_m16", "mfma"),
    ("sdpa_rdna", "gfx11-generic", "sdpa_rdna_bf16_d64_mask-causal_bias-none", "wmma"),
    ("sdpa_rdna4", "gfx12-generic", None, "wmma"),
    ("sdpa_rdna_decode", "gfx12-generic", "sdpa_rdna_decode_bf16_d128_causal_c128_m16", "wmma"),
]


def _first_name(project: Path, op: str, target: str) -> str:
    for line in (project / "instances" / f"{op}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["target"] == target:
            return row["name"]
    raise AssertionError(f"no {op} row for {target}")


def _selection(rows: list[tuple[str, str, str, str]]) -> str:
    return "names=[" + ",".join(f"{op}/{target}/{name}" for op, target, name, _ in rows) + "]"


@pytest.fixture(scope="module")
def attention(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str, str, str]]]:
    """One object of each attention family, built for real."""
    project = copy_project(tmp_path_factory.mktemp("attention"))
    rows = [(op, target, name or _first_name(project, op, target), cls) for op, target, name, cls in ATTENTION_ROWS]
    run_farm(project, "build", _selection(rows), check=True)
    return project, rows


@pytest.mark.slow
def test_attention_objects_issue_matrix_instructions(attention: tuple[Path, list]) -> None:
    project, rows = attention
    for op, target, name, cls in rows:
        manifest = json.loads((project / "outputs" / op / target / "manifest.json").read_text())
        entry = next(e for e in manifest["objects"] if e["name"] == name)
        totals = entry["code_object"]["instructions"]
        other = "wmma" if cls == "mfma" else "mfma"
        assert totals[cls] > 0 and totals[other] == 0, (op, target, totals)
        assert sorted(totals) == sorted(CLASS_NAMES)
        per_kernel = [k["instructions"] for k in entry["kernels"]]
        assert {c: sum(k[c] for k in per_kernel) for c in CLASS_NAMES} == totals
    check = run_farm(project, "check", _selection(rows))
    assert check.returncode == 0, check.stdout
    n = len(rows)  # one object of each directory, the rest of its table not built (and not selected)
    assert last_line(check.stdout) == (f"checked {n} objects and {n} manifests in {n} directories "
                                       "against the build record (outputs.sha256 not recorded yet: `farm golden`): "
                                       "no drift")


@pytest.mark.slow
def test_check_recomputes_the_counts(attention: tuple[Path, list], tmp_path: Path) -> None:
    source, rows = attention
    project = tmp_path / "p"
    shutil.copytree(source, project)
    op, target, name, cls = rows[0]
    path = project / "outputs" / op / target / "manifest.json"
    data = json.loads(path.read_text())
    data["objects"][0]["kernels"][0]["instructions"][cls] += 1
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    check = run_farm(project, "check", _selection(rows))
    assert check.returncode == 1
    assert f"{name}.hsaco: manifest 'kernels' does not match the object" in check.stdout


@pytest.mark.slow
def test_a_missing_required_class_fails_the_row(tmp_path: Path) -> None:
    """RMSNorm has no matrix instructions: requiring MFMA must fail its row, naming the class."""
    project = copy_project(tmp_path / "p")
    op_file = project / "conf" / "op" / "rmsnorm.yaml"
    op_file.write_text(op_file.read_text().replace("\nsymbols:", "\nrequire_instructions: [mfma]\nsymbols:", 1))
    proc = run_farm(project, "build", "ops=[rmsnorm]", "targets=[gfx942]", "names=[rmsnorm_bf16_infer_generic]")
    assert proc.returncode == 1
    assert ("rmsnorm/gfx942/rmsnorm_bf16_infer_generic failed: verification failed: no mfma instructions "
            "(v_mfma_*) in the disassembly; op rmsnorm requires them") in proc.stderr
    assert not (project / "outputs" / "rmsnorm" / "gfx942" / "rmsnorm_bf16_infer_generic.hsaco").exists()


def test_a_typo_in_the_class_names_the_accepted_ones(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    op_file = project / "conf" / "op" / "sdpa_cdna.yaml"
    op_file.write_text(op_file.read_text().replace("require_instructions: [mfma]", "require_instructions: [mfam]"))
    proc = run_farm(project, "plan")
    assert proc.returncode == 2
    assert "unknown instruction class 'mfam' in require_instructions (did you mean 'mfma'?)" in proc.stderr
    op_file.write_text(op_file.read_text().replace("require_instructions: [mfam]", "require_instruction: [mfma]"))
    proc = run_farm(project, "plan")
    assert "unknown key 'require_instruction' (did you mean 'require_instructions'?)" in proc.stderr


def test_a_missing_disassembler_is_named_before_any_compile(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    pin = project / "conf" / "toolchain" / "pinned.yaml"
    pin.write_text(pin.read_text().replace("/usr/bin/llvm-objdump-22", "/nonexistent/llvm-objdump"))
    for verb in ("build", "check"):
        proc = run_farm(project, verb, "ops=[rmsnorm]", "targets=[gfx942]")
        assert proc.returncode == 2
        assert ("disassembler missing: /nonexistent/llvm-objdump (pinned disassembler.path) is not an executable"
                in proc.stderr)
        assert "apt-get install llvm-22" in proc.stderr
    assert not (project / "outputs").exists()
    assert not (project / ".farm" / "reports").exists()


def test_mnemonics_fall_in_the_first_matching_class() -> None:
    assert classify("v_mfma_f32_32x32x16_bf16") == "mfma"
    assert classify("v_wmma_f32_16x16x16_f16") == "wmma"
    assert classify("ds_read_b128") == "lds" and classify("ds_load_b128") == "lds"
    assert classify("buffer_load_dwordx4") == "vmem" and classify("global_store_b32") == "vmem"
    assert classify("s_load_dwordx8") == "smem"
    assert classify("s_waitcnt") == "wait" and classify("s_wait_loadcnt") == "wait" and classify("s_nop") == "wait"
    assert classify("s_cbranch_scc1") == "branch" and classify("s_endpgm") == "branch"
    assert classify("s_mul_i32") == "salu" and classify("v_add_f32_e32") == "valu"
    assert classify("image_sample") == "other"


def test_output_of_several_files_splits_by_file_and_function() -> None:
    a, b = Path("/x/a b.hsaco"), Path("/x/b.hsaco")
    text = (f"\n{a}:\tfile format elf64-amdgpu\n\nDisassembly of section .text:\n\n<k1>:\n"
            "\tv_mfma_f32_32x32x16_bf16 a[0:15], v[0:3], v[4:7], 0\n\ts_endpgm\n\n<k2>:\n\tds_read_b128 v[0:3], v1\n"
            f"\n{b}:\tfile format elf64-amdgpu\n\nDisassembly of section .text:\n\n<k1>:\n\tv_add_f32_e32 v0, v1, v2\n")
    found = parse_listing(text, [a, b])
    assert found[a]["k1"]["mfma"] == 1 and found[a]["k1"]["branch"] == 1 and found[a]["k2"]["lds"] == 1
    assert found[b] == {"k1": {**dict.fromkeys(CLASS_NAMES, 0), "valu": 1}}


@pytest.mark.slow
def test_attention_warm_forks_match_fresh_processes(attention: tuple[Path, list], tmp_path: Path) -> None:
    """The warm zygote (which pre-imports FlyDSL's lazily loaded modules and freezes the GC) gives
    the same bytes as a fresh interpreter per row, for every attention family."""
    project, rows = attention
    out = tmp_path / "fresh"
    run_farm(project, "build", _selection(rows), f"outputs_dir={out}", "executor.warm=false", *on_shared_ray(),
             check=True)  # fresh actors on the session's Ray cluster: no Ray start of its own
    for op, target, name, _ in rows:
        warm = project / "outputs" / op / target / f"{name}.hsaco"
        assert (out / op / target / f"{name}.hsaco").read_bytes() == warm.read_bytes(), (op, target, name)


# ---- one bad object among many (case 9) and the disassembler's scratch directories (case 14) ----------

BWD = ("rmsnorm_bwd", "gfx942")
BWD_SELECTION = ("ops=[rmsnorm_bwd]", "targets=[gfx942]", "dtypes=[f32]")
PINNED = yaml.safe_load((REPO / "conf" / "toolchain" / "pinned.yaml").read_text())["disassembler"]


@pytest.fixture(scope="module")
def bwd_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real rmsnorm_bwd objects for gfx942 (f32), built once for this module."""
    project = copy_project(tmp_path_factory.mktemp("bwd"))
    run_farm(project, "build", *BWD_SELECTION, check=True)
    return project


def _objects(project: Path) -> list[Path]:
    found = sorted((project / "outputs").joinpath(*BWD).glob("*.hsaco"))
    assert len(found) == 3
    return found


@pytest.mark.slow
def test_case9_one_truncated_object_does_not_taint_the_others(bwd_built: Path, tmp_path: Path) -> None:
    """llvm-objdump stops at the first bad file of a batch: the objects after it must still be checked."""
    project = tmp_path / "p"
    shutil.copytree(bwd_built, project)
    first, *others = _objects(project)  # the truncated one comes first in the batch
    first.write_bytes(first.read_bytes()[:3000])
    proc = run_farm(project, "check", *BWD_SELECTION)
    assert proc.returncode == 1
    drift = [line for line in proc.stdout.splitlines() if line.startswith("DRIFT ")]
    assert drift and all(line.startswith(f"DRIFT {first}: ") for line in drift), proc.stdout
    assert not any(str(other) in proc.stdout for other in others)


def _unknown_machine(data: bytes) -> bytes:
    """A sound ELF structure the disassembler still cannot read (no target for e_machine 0x1234): it stops
    the batch at this file. (A truncated object no longer reaches it: farm/elf/structure.py.)"""
    return data[:18] + (0x1234).to_bytes(2, "little") + data[20:]


@pytest.mark.slow
def test_case9_count_files_gives_the_bad_file_its_own_reason(bwd_built: Path, tmp_path: Path) -> None:
    good = _objects(bwd_built)
    bad = tmp_path / "a_bad.hsaco"
    bad.write_bytes(_unknown_machine(good[0].read_bytes()))
    truncated = tmp_path / "b_truncated.hsaco"
    truncated.write_bytes(good[0].read_bytes()[:3000])
    batch = count_files(PINNED, "gfx942", [bad, truncated, *good])
    for path in good:
        assert batch[path] == count_files(PINNED, "gfx942", [path])[path]
        assert any(counts["valu"] for counts in batch[path].values())
    reason = batch[bad]
    assert isinstance(reason, str) and reason.startswith("the disassembler could not read it: ")
    assert "can't find target" in reason and str(bad) not in reason
    cut = batch[truncated]
    assert isinstance(cut, str) and cut.startswith(f"{disasm.MALFORMED}: ") and "past the end of the file" in cut


@pytest.mark.slow
def test_a_large_batch_s_listing_is_parsed_apart_with_the_same_counts(
        bwd_built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At PARSE_APART_AT objects the listing is parsed by a child Python (listing.py, stdlib only), not in
    the driver: the same counts; a child that fails or answers nonsense only costs a parse in the driver."""
    objects = [p.read_bytes() for p in _objects(bwd_built)] * 2
    here = count_many(PINNED, "gfx942", objects)
    assert len(objects) < disasm.PARSE_APART_AT and all(isinstance(r, dict) for r in here)
    children: list[list[str]] = []
    real_run = subprocess.run

    def watched(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        children.append([str(c) for c in command])
        return real_run(command, **kwargs)

    monkeypatch.setattr(disasm.subprocess, "run", watched)
    monkeypatch.setattr(disasm, "PARSE_APART_AT", 2)
    assert count_many(PINNED, "gfx942", objects) == here
    assert [c[1:4] for c in children if c[0] == sys.executable] == [["-I", "-S", listing.__file__]]
    for answer in ("exit 1", "echo not json", """echo '{"/not/asked.hsaco": {}}'""", "echo '[]'"):
        child, ran = tmp_path / "child", tmp_path / "ran"
        child.write_text(f"#!/bin/sh\ntouch {ran}\n{answer}\n")
        child.chmod(0o755)
        ran.unlink(missing_ok=True)
        monkeypatch.setattr(disasm.sys, "executable", str(child))
        assert count_many(PINNED, "gfx942", objects) == here, answer
        assert ran.exists(), answer  # the broken child was asked, and its answer set aside


@pytest.mark.slow
def test_case9_count_many_shares_the_path(bwd_built: Path) -> None:
    good = _objects(bwd_built)[1].read_bytes()
    bad, fine = count_many(PINNED, "gfx942", [_unknown_machine(good), good])
    assert isinstance(bad, str) and "could not read it" in bad and ".hsaco" not in bad
    assert fine == count_files(PINNED, "gfx942", [_objects(bwd_built)[1]])[_objects(bwd_built)[1]]


@pytest.mark.slow
def test_mutated_objects_never_crash_the_disassembler(bwd_built: Path) -> None:
    """Fuzz: truncations, byte flips and junk appended give a result or a reason each, never an exception."""
    base = _objects(bwd_built)[0].read_bytes()
    rng = random.Random(20261201)
    mutants = []
    for i in range(48):
        data = bytearray(base)
        if i % 3 == 0:
            data = data[: rng.randrange(len(data))]
        elif i % 3 == 1:
            for _ in range(rng.randrange(1, 16)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 512)))
        mutants.append(bytes(data))
    results = count_many(PINNED, "gfx942", mutants)
    assert len(results) == len(mutants)
    assert all(isinstance(r, dict | str) for r in results)
    assert any(isinstance(r, str) for r in results)


@pytest.mark.slow
def test_case14_disasm_scratch_is_private_and_dead_processes_leftovers_are_swept(
        bwd_built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = private_dir("disasm")
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = root / f"{gone.pid}-leftover"
    dead.mkdir()
    (dead / "object0.hsaco").write_bytes(b"x")
    alive = subprocess.Popen(["sleep", "60"])
    try:
        living = root / f"{alive.pid}-inuse"
        living.mkdir()
        assert isinstance(count_many(PINNED, "gfx942", [_objects(bwd_built)[0].read_bytes()])[0], dict)
        own = [p for p in root.iterdir() if p.name.startswith(f"{os.getpid()}-")]  # kept for the process's life
        assert sorted(p.name for p in root.iterdir() if p not in own) == [living.name]
        assert len(own) == 1 and not list(own[0].iterdir())  # the objects it disassembled are gone
    finally:
        alive.kill()
        alive.wait()
    assert root.parent == tmp_path / f"farm-{os.getuid()}"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE(root.parent.stat().st_mode) == 0o700

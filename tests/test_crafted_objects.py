"""Crafted objects (issue 37 case 4): a code object whose ELF structure lies (a section header saying
`sh_size = 2**63`, a section past the end of the file, ...) is DRIFT, named, in seconds. It never reaches the
disassembler (farm/elf/structure.py); and should one get past that check, the disassembler's output is
bounded and it has a short time limit of its own (farm/toolchain/disasm.py)."""

from __future__ import annotations

import io
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import REPO, built_copy
from elftools.elf.elffile import ELFFile

from farm.contract import CompileResult
from farm.plan.digest import CompileRecord, farm_hashes
from farm.plan.sources import Tree, collect
from farm.store import manifest
from farm.store.outtree import OutputDir
from farm.table.config import load
from farm.table.rows import Row
from farm.toolchain import disasm
from farm.toolchain.installed import compile_part
from farm.verify import accept as acceptance

pytestmark = pytest.mark.slow

OP, TARGET, NAME = "rmsnorm", "gfx942", "rmsnorm_bf16_infer_generic"  # a row of the session's small table
SELECTION = (f"targets=[{TARGET}]", f"names=[{NAME}]")
PINNED = yaml.safe_load((REPO / "conf" / "toolchain" / "pinned.yaml").read_text())["disassembler"]
# Far above what `farm check` of one object takes (~2 s on a loaded 2-core machine); only a hang reaches it.
CHECK_TIMEOUT_S = 90.0
SYMBOL = struct.Struct("<IBBHQQ")
SH_OFFSET, SH_SIZE = 24, 32  # byte offsets of the fields in a section header
E_SHNUM, E_SHSTRNDX = 0x3C, 0x3E


def _section(data: bytes, name: str) -> tuple[int, int]:
    """(index, header offset) of the section called `name`."""
    elf = ELFFile(io.BytesIO(data))
    for index, section in enumerate(elf.iter_sections()):
        if section.name == name:
            return index, elf.header["e_shoff"] + index * elf.header["e_shentsize"]
    raise AssertionError(f"no {name} section")


def _set(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, at, value)
    return bytes(out)


def symtab_size_2_63(data: bytes) -> bytes:
    """The issue's object: llvm-objdump warned about it without end and the farm kept every line."""
    return _set(data, _section(data, ".symtab")[1] + SH_SIZE, "Q", 2**63)


def text_offset_past_eof(data: bytes) -> bytes:
    return _set(data, _section(data, ".text")[1] + SH_OFFSET, "Q", len(data) + 4096)


def huge_e_shnum(data: bytes) -> bytes:
    return _set(data, E_SHNUM, "H", 0xFFF0)


def e_shstrndx_out_of_range(data: bytes) -> bytes:
    shnum = struct.unpack_from("<H", data, E_SHNUM)[0]
    return _set(data, E_SHSTRNDX, "H", shnum + 3)


def truncated(data: bytes) -> bytes:
    return data[: len(data) - 100]  # part of the section header table is gone


def _kernel_symbol(data: bytes) -> int:
    """The offset of the kernel's function symbol in .symtab."""
    elf = ELFFile(io.BytesIO(data))
    symtab = elf.get_section_by_name(".symtab")
    for i, symbol in enumerate(symtab.iter_symbols()):
        if symbol["st_info"]["type"] == "STT_FUNC":
            return symtab["sh_offset"] + i * SYMBOL.size
    raise AssertionError("no function symbol")


def symbol_past_its_section(data: bytes) -> bytes:
    return _set(data, _kernel_symbol(data) + 8, "Q", 1 << 40)  # st_value far past .text


def symbol_in_no_section(data: bytes) -> bytes:
    return _set(data, _kernel_symbol(data) + 6, "H", 0x7777)  # st_shndx: no such section


# (corruption, what the DRIFT line says is wrong)
CASES: list[tuple[Callable[[bytes], bytes], str]] = [
    (symtab_size_2_63, "(.symtab) runs past the end of the file: offset"),
    (text_offset_past_eof, "(.text) runs past the end of the file"),
    (huge_e_shnum, "section header table (65520 headers at offset"),
    (e_shstrndx_out_of_range, "is not a section (e_shnum"),
    (truncated, "section header table ("),
    (symbol_past_its_section, "lies outside section"),
    (symbol_in_no_section, "st_shndx 30583 is not a section"),
]


@pytest.fixture(scope="module")
def tree(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One private copy of the session's built project; each test puts its object back."""
    return built_copy(built, tmp_path_factory.mktemp("crafted"))


def _object(project: Path) -> Path:
    return project / "outputs" / OP / TARGET / f"{NAME}.hsaco"


def check_within_limit(project: Path, *args: str) -> subprocess.CompletedProcess:
    """`farm check` that must end within CHECK_TIMEOUT_S: a hang fails the test (its processes killed)."""
    env = {k: v for k, v in os.environ.items() if k != "FARM_PROJECT"}
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", "check", *args], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the farm and the disassembler it started (same group)
        proc.communicate()
        pytest.fail(f"farm check {' '.join(args)} still running after {CHECK_TIMEOUT_S:g} s (killed)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize(("corrupt", "named"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_a_crafted_object_is_drift_named_in_seconds(tree: Path, corrupt: Callable[[bytes], bytes],
                                                      named: str) -> None:
    path = _object(tree)
    good = path.read_bytes()
    try:
        path.write_bytes(corrupt(good))
        proc = check_within_limit(tree, *SELECTION)
    finally:
        path.write_bytes(good)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    drift = [line for line in proc.stdout.splitlines() if line.startswith("DRIFT ")]
    assert drift and all(line.startswith(f"DRIFT {path}: ") for line in drift), proc.stdout
    assert any("malformed" in line and named in line for line in drift), proc.stdout
    assert "Traceback" not in proc.stderr


def test_the_tree_is_clean_between_cases(tree: Path) -> None:
    """The cases above restore the object: the same check on the untouched tree finds no drift."""
    proc = check_within_limit(tree, *SELECTION)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_real_object_passes_the_structure_check(built: Path) -> None:
    objects = sorted(built.glob("outputs/*/*/*.hsaco"))
    assert len(objects) >= 30
    assert {path: disasm.structure.problem(path.read_bytes()) for path in objects} == dict.fromkeys(objects)


def _started(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands disasm starts from now on (still run)."""
    started: list[list[str]] = []
    real = subprocess.Popen

    def watched(command: list[str], **kwargs: object) -> subprocess.Popen:
        started.append([str(c) for c in command])
        return real(command, **kwargs)

    monkeypatch.setattr(disasm.subprocess, "Popen", watched)
    return started


def test_the_build_path_never_hands_a_crafted_object_to_the_disassembler(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A freshly compiled object is disassembled from memory (acceptance.disassemble -> count_many)."""
    good = _object(built).read_bytes()
    started = _started(monkeypatch)
    bad, fine = disasm.count_many(PINNED, TARGET, [symtab_size_2_63(good), good])
    assert isinstance(bad, str) and bad.startswith(f"{disasm.MALFORMED}: section ") and ".symtab" in bad
    assert isinstance(fine, dict) and fine
    assert len(started) == 1 and len(started[0]) == 6  # one run, of the sound object only (5 arguments + it)


def linked_by_another_linker(data: bytes) -> bytes:
    """The linker's name in .comment changed in place: a sound object that another linker linked."""
    assert data.count(b"Linker: LLD 22.1.8") == 1
    return data.replace(b"Linker: LLD 22.1.8", b"Linker: LLD 19.1.7")


@pytest.mark.parametrize(("corrupt", "reason"), [
    (symtab_size_2_63, "object is not a code object: not a readable ELF file (malformed: section "),
    (symbol_past_its_section, f"object cannot be disassembled: {disasm.MALFORMED}: section "),
    (linked_by_another_linker, "verification failed: linked by 'Linker: LLD 19.1.7' (.comment), the pinned "
                               "linker is 'LLD 22.1.8'"),
])
def test_a_build_refuses_a_crafted_object_naming_what_is_wrong(built: Path, corrupt: Callable[[bytes], bytes],
                                                                reason: str) -> None:
    """What `farm build` does with a worker's object: disassemble it, then accept or refuse it."""
    cfg = load(built, [])
    with OutputDir(cfg.outputs_dir, OP, TARGET) as out:
        entry = manifest.read(out).entries[f"{NAME}.hsaco"]
    inputs = entry["inputs"]
    assert isinstance(inputs, dict)
    row = Row(OP, TARGET, NAME, str(entry["group"]), dict(entry["knobs"]), dict(entry["allow"]))
    result = CompileResult(key=row.key, ok=True, elf=corrupt(_object(built).read_bytes()), node="test",
                           toolchain=compile_part(cfg.toolchain_pin), sources=dict(inputs["sources"]),
                           lookups=tuple(inputs["lookups"]),
                           generator={k: v for k, v in farm_hashes(inputs["generator"]).items() if v})
    compiled = CompileRecord.of_result(result, Tree.of(collect(cfg.kernels_dir)))
    counts = acceptance.disassemble(cfg, [(row, result)])
    entry_made, refused = acceptance.accept(cfg, row, result, compiled, counts[row.key])
    assert entry_made is None and refused is not None and refused.startswith(reason), refused


def test_output_past_the_limit_stops_the_disassembler(built: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Should a crafted object get past the structure check, the disassembler is stopped at its output limit
    instead of printing the same warning without end into the farm's memory."""
    path = tmp_path / "crafted.hsaco"
    path.write_bytes(symtab_size_2_63(_object(built).read_bytes()))
    monkeypatch.setattr(disasm.structure, "problem", lambda data: None)  # as if the check had missed it
    reason = disasm.count_files(PINNED, TARGET, [path])[path]
    assert isinstance(reason, str) and reason.startswith("the disassembler printed "), reason
    assert "(stopped): " in reason and "invalid sh_size" in reason
    assert reason.count("invalid sh_size") == 1  # the endless warning is given once


def test_a_disassembler_that_hangs_is_stopped_with_its_process_group(
        built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in disassembler that never ends (and starts a child of its own): stopped at the time limit,
    the batch's run and the object's own, each with everything it started."""
    children = tmp_path / "children"
    hang = tmp_path / "hang.sh"
    hang.write_text(f"#!/bin/sh\nsleep 60 &\necho $! >> {children}\nsleep 60\n")
    hang.chmod(0o755)
    obj = tmp_path / "object.hsaco"
    shutil.copyfile(_object(built), obj)
    monkeypatch.setattr(disasm, "ALONE_TIMEOUT_S", 1.0)
    reason = disasm.count_files({"path": str(hang)}, TARGET, [obj])[obj]
    assert reason == "the disassembler did not finish within 1 s (stopped): no output"
    pids = [int(pid) for pid in children.read_text().split()]
    assert len(pids) == 2  # the batch's run, then the object alone
    deadline = time.monotonic() + 10  # killed at once; reaped by init in its own time
    while any(map(_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_running, pids)), "a process the disassembler started outlived it"


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie waiting for its parent is not running

"""Read what an AMDGPU code object says about itself: ELF header, sections, symbols, metadata note."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import msgpack
from elftools.elf.elffile import ELFFile

from farm.elf import fast
from farm.toolchain import elfcheck

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64  # pyelftools names value 64 ELFOSABI_ARM_AEABI (shared number)
NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_GENERIC_VERSION_SHIFT = 24


@dataclass
class CodeObject:
    """The facts the farm checks and records about one .hsaco."""

    e_machine: int
    e_flags: int
    os_abi: int
    abi_version: int
    sections: dict[str, bytes]
    kernel_symbols: list[str]
    metadata: dict[str, Any]
    comment: str = ""

    @property
    def mach(self) -> int:
        return self.e_flags & EF_AMDGPU_MACH

    @property
    def generic_version(self) -> int:
        return (self.e_flags >> EF_AMDGPU_GENERIC_VERSION_SHIFT) & 0xFF

    @property
    def amdhsa_target(self) -> str:
        return str(self.metadata.get("amdhsa.target", ""))

    @property
    def kernels(self) -> list[dict[str, Any]]:
        return list(self.metadata.get("amdhsa.kernels", []))


class NotACodeObject(ValueError):
    pass


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_decode(k): _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def read_code_object(data: bytes) -> CodeObject:
    """Parse `data`; raises NotACodeObject if it is not an AMDGPU HSA ELF with a metadata note. A plain
    AMDGPU object is read directly (farm/elf/fast.py); any other file, or one that reader finds anything odd in, is
    first checked for a sound ELF structure (elfcheck: a malformed one is named for what is wrong with it),
    then read with pyelftools as it always was."""
    try:
        return _read_plain(data)
    except Exception:  # noqa: BLE001  anything odd at all: the general reader decides
        problem = elfcheck.problem(data)
        if problem:
            raise NotACodeObject(f"not a readable ELF file (malformed: {problem})") from None
        return _read_general(data)


def _read_plain(data: bytes) -> CodeObject:
    facts = fast.read(data)
    if facts.metadata_raw is None:
        raise fast.Irregular("no metadata note")
    metadata = _decode(msgpack.unpackb(facts.metadata_raw, raw=True, strict_map_key=False))
    if not isinstance(metadata, dict):
        raise fast.Irregular("metadata is not a map")
    return _code_object(EM_AMDGPU, facts.e_flags, ELFOSABI_AMDGPU_HSA, facts.abi_version, facts.sections,
                        facts.kernel_symbols, metadata)


def _code_object(e_machine: int, e_flags: int, os_abi: int, abi_version: int, sections: dict[str, bytes],
                 symbols: list[str], metadata: dict[str, Any]) -> CodeObject:
    comment = sections.get(".comment", b"").replace(b"\x00", b"\n").decode("utf-8", "replace").strip()
    return CodeObject(e_machine=e_machine, e_flags=e_flags, os_abi=os_abi, abi_version=abi_version,
                      sections=sections, kernel_symbols=sorted(symbols), metadata=metadata, comment=comment)


def _read_general(data: bytes) -> CodeObject:
    """pyelftools: any ELF, any oddity."""
    try:
        elf = ELFFile(io.BytesIO(data))
        header = elf.header
        sections: dict[str, bytes] = {}
        metadata: dict[str, Any] | None = None
        symbols: list[str] = []
        for section in elf.iter_sections():
            name = section.name
            sections[name] = b"" if section.header["sh_type"] == "SHT_NOBITS" else section.data()
            if section.header["sh_type"] == "SHT_NOTE":
                for note in section.iter_notes():
                    if note["n_name"] == "AMDGPU" and note["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                        desc = note["n_descdata"]
                        raw = desc if isinstance(desc, bytes) else desc.encode("latin-1")
                        metadata = _decode(msgpack.unpackb(raw, raw=True, strict_map_key=False))
            if section.header["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM") and name == ".symtab":
                for sym in section.iter_symbols():
                    if sym["st_info"]["type"] == "STT_FUNC" and sym["st_info"]["bind"] == "STB_GLOBAL":
                        symbols.append(sym.name)
        machine = header["e_machine"]
        e_machine = EM_AMDGPU if machine == "EM_AMDGPU" else int(machine) if isinstance(machine, int) else -1
        os_abi = header["e_ident"]["EI_OSABI"]
        os_abi_num = ELFOSABI_AMDGPU_HSA if os_abi in ("ELFOSABI_AMDGPU_HSA", "ELFOSABI_ARM_AEABI", 64) else -1
    except NotACodeObject:
        raise
    except Exception as exc:  # pyelftools raises many types on garbage input
        raise NotACodeObject(f"not a readable ELF file ({type(exc).__name__}: {exc})") from None
    if metadata is None:
        raise NotACodeObject("no NT_AMDGPU_METADATA note")
    return _code_object(e_machine, header["e_flags"], os_abi_num, header["e_ident"]["EI_ABIVERSION"], sections,
                        symbols, metadata)

"""Read what an AMDGPU code object says about itself: ELF header, sections, symbols, metadata note."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from farm.elf import fast, image, structure

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
    first checked for a sound ELF structure (farm/elf/structure.py: a malformed one is named for what is wrong
    with it), then read whole with pyelftools (farm/elf/image.py)."""
    try:
        return _read_plain(data)
    except Exception:  # noqa: BLE001  anything odd at all: the general reader decides
        problem = structure.problem(data)
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
        elf = image.read(data)
        sections = {sec.name: sec.data for sec in elf.sections}
        metadata: dict[str, Any] | None = None
        for note in (n for sec in elf.sections for n in sec.notes):
            if note.name == "AMDGPU" and note.type in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                metadata = _decode(msgpack.unpackb(note.desc, raw=True, strict_map_key=False))
        symbols = [sym.name for sym in elf.symbols if sym.table == ".symtab" and sym.type == "STT_FUNC"
                   and sym.bind == "STB_GLOBAL"]
    except image.Unreadable as exc:
        raise NotACodeObject(f"not a readable ELF file ({exc})") from None
    except Exception as exc:  # noqa: BLE001  a metadata note msgpack cannot read
        raise NotACodeObject(f"not a readable ELF file ({type(exc).__name__}: {exc})") from None
    if metadata is None:
        raise NotACodeObject("no NT_AMDGPU_METADATA note")
    header = elf.header
    e_machine = header.e_machine if isinstance(header.e_machine, int) else -1
    os_abi = ELFOSABI_AMDGPU_HSA if header.EI_OSABI == ELFOSABI_AMDGPU_HSA else -1
    return _code_object(e_machine, header.e_flags, os_abi, header.EI_ABIVERSION, sections, symbols, metadata)

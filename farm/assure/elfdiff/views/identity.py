"""Who made the object and for what: the linker's .comment, and the target (e_machine, e_flags, OS/ABI,
the metadata's amdhsa.target and amdhsa.version). A difference here explains everything below it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from farm.assure.elfdiff.difference import ABSENT, Difference, same, show, show_hex
from farm.assure.elfdiff.parse import Parsed
from farm.assure.elfdiff.views.base import View
from farm.elf.code_object import EF_AMDGPU_GENERIC_VERSION_SHIFT, EF_AMDGPU_MACH, ELFOSABI_AMDGPU_HSA

FEATURE_SETTING_V4 = ("unsupported", "any", "off", "on")  # e_flags xnack/sramecc 2-bit fields (ABI v4+)


def _comment_strings(parsed: Parsed) -> list[str]:
    sec = parsed.sections.get(".comment")
    if sec is None:
        return []
    return [s.decode("utf-8", "replace").strip() for s in sec.data.split(b"\0") if s.strip()]


def _joined(strings: list[str]) -> str:
    return repr("; ".join(strings)) if strings else "(none)"


class Linker(View):
    """The .comment strings: the linker's own line first, else the whole toolchain identity."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        ca, cb = _comment_strings(a), _comment_strings(b)
        if ca == cb:
            return
        la, lb = [s for s in ca if s.startswith("Linker:")], [s for s in cb if s.startswith("Linker:")]
        what, sa, sb = ("linker", la, lb) if la != lb else ("toolchain identity", ca, cb)
        yield Difference("linker", ".comment", ca, cb, f"{what} differs (.comment: {_joined(sa)} vs {_joined(sb)})")


def e_flags_fields(e_flags: int, abi_version: int) -> dict[str, int | str]:
    """e_flags split the way the loader reads it: machine, generic version, feature settings, the rest."""
    if abi_version >= 2:  # code object v4+: 2-bit xnack/sramecc settings
        features = {"xnack": FEATURE_SETTING_V4[(e_flags >> 8) & 3],
                    "sramecc": FEATURE_SETTING_V4[(e_flags >> 10) & 3]}
        known = EF_AMDGPU_MACH | 0xF00
    else:  # code object v3: one bit each
        features = {"xnack": "on" if e_flags & 0x100 else "off", "sramecc": "on" if e_flags & 0x200 else "off"}
        known = EF_AMDGPU_MACH | 0x300
    known |= 0xFF << EF_AMDGPU_GENERIC_VERSION_SHIFT
    return {"machine": e_flags & EF_AMDGPU_MACH, "generic version": (e_flags >> EF_AMDGPU_GENERIC_VERSION_SHIFT) & 0xFF,
            **features, "other bits": e_flags & ~known}


def _osabi(value: Any) -> str:
    return f"{value} (AMDGPU_HSA)" if value == ELFOSABI_AMDGPU_HSA else str(value)


class Target(View):
    """What the object runs on: machine, e_flags field by field, OS/ABI, code object version, amdhsa.target."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        ha, hb = a.header, b.header
        if ha.e_machine != hb.e_machine:
            yield Difference("target", "e_machine", ha.e_machine, hb.e_machine,
                             f"e_machine {ha.e_machine} vs {hb.e_machine} (AMDGPU is 224)")
        yield from self._e_flags(ha.e_flags, ha.EI_ABIVERSION, hb.e_flags, hb.EI_ABIVERSION)
        if ha.EI_OSABI != hb.EI_OSABI:
            yield Difference("target", "EI_OSABI", ha.EI_OSABI, hb.EI_OSABI,
                             f"OS/ABI {_osabi(ha.EI_OSABI)} vs {_osabi(hb.EI_OSABI)}")
        if ha.EI_ABIVERSION != hb.EI_ABIVERSION:
            va, vb = ha.EI_ABIVERSION, hb.EI_ABIVERSION
            yield Difference("target", "EI_ABIVERSION", va, vb,
                             f"ELF ABI version {va} vs {vb} (code object v{va + 2} vs v{vb + 2})")
        if a.metadata is None or b.metadata is None:
            return
        for key in ("amdhsa.target", "amdhsa.version"):
            va, vb = a.metadata.get(key, ABSENT), b.metadata.get(key, ABSENT)
            if not same(va, vb):
                yield Difference("target", key, va, vb, f"{key} {show(va)} vs {show(vb)}")

    @staticmethod
    def _e_flags(flags_a: int, abi_a: int, flags_b: int, abi_b: int) -> Iterator[Difference]:
        fa, fb = e_flags_fields(flags_a, abi_a), e_flags_fields(flags_b, abi_b)
        for key, va in fa.items():
            vb = fb[key]
            if va != vb:
                shown = (show_hex(va, 3), show_hex(vb, 3)) if key in ("machine", "other bits") else (str(va), str(vb))
                yield Difference("target", f"e_flags.{key}", va, vb, f"e_flags {key} {shown[0]} vs {shown[1]}",
                                 detail=f"e_flags 0x{flags_a:08x} vs 0x{flags_b:08x}")

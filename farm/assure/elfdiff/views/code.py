"""What the hardware runs: the kernel descriptors the loader programs, and the .text bytes."""

from __future__ import annotations

from collections.abc import Iterator

from farm.assure.elfdiff.difference import Difference, first_difference, show_hex
from farm.assure.elfdiff.parse import Parsed, Symbol
from farm.assure.elfdiff.views.base import View

KD_SIZE = 64
# AMDGPU kernel descriptor (code object v3+): (offset, size, field); see LLVM AMDGPUUsage.
KD_FIELDS = (
    (0, 4, "group_segment_fixed_size"), (4, 4, "private_segment_fixed_size"), (8, 4, "kernarg_size"),
    (12, 4, "reserved0"), (16, 8, "kernel_code_entry_byte_offset"), (24, 20, "reserved1"),
    (44, 4, "compute_pgm_rsrc3"), (48, 4, "compute_pgm_rsrc1"), (52, 4, "compute_pgm_rsrc2"),
    (56, 2, "kernel_code_properties"), (58, 2, "kernarg_preload"), (60, 4, "reserved3"),
)


def _kd_bytes(parsed: Parsed, sym: Symbol) -> bytes | None:
    sec = parsed.sections.get(sym.section)
    if sec is None or sym.size != KD_SIZE:
        return None
    start = sym.value - sec.addr
    if start < 0:
        return None
    data = sec.data[start:start + KD_SIZE]
    return data if len(data) == KD_SIZE else None


def _rsrc1_detail(a: int, b: int) -> str:
    """COMPUTE_PGM_RSRC1 bits 5:0 / 9:6 are the granulated VGPR / SGPR counts the hardware allocates."""
    return (f"granulated VGPR count {a & 0x3F} vs {b & 0x3F}, "
            f"granulated SGPR count {(a >> 6) & 0xF} vs {(b >> 6) & 0xF}")


class Descriptors(View):
    """Kernel descriptors (`<kernel>.kd`, 64 bytes): what the loader actually programs, field by field."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        for key, sa in a.symbols.items():
            sb = b.symbols.get(key)
            if key[0] != ".symtab" or sb is None or not sa.name.endswith(".kd"):
                continue
            da, db = _kd_bytes(a, sa), _kd_bytes(b, sb)
            if da is None or db is None or da == db:
                continue
            for offset, size, name in KD_FIELDS:
                va = int.from_bytes(da[offset:offset + size], "little")
                vb = int.from_bytes(db[offset:offset + size], "little")
                if va != vb:
                    detail = _rsrc1_detail(va, vb) if name == "compute_pgm_rsrc1" else ""
                    yield Difference("descriptor", f"{sa.name} {name}", va, vb,
                                     f"{sa.name} {name} {show_hex(va)} vs {show_hex(vb)}", detail=detail, offset=offset)


def _words(data: bytes, offset: int) -> str:
    """The (up to) two instruction dwords around `offset`, as hex: enough to spot a changed encoding."""
    start = offset - offset % 4
    chunk = data[start:start + 8]
    return " ".join(chunk[i:i + 4][::-1].hex() for i in range(0, len(chunk), 4)) or "(end)"


class Text(View):
    """The code: its size, the first differing instruction words and the kernel they belong to."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        ta, tb = a.sections.get(".text"), b.sections.get(".text")
        if ta is None or tb is None or ta.data == tb.data:
            return
        if len(ta.data) != len(tb.data):
            yield Difference("text", ".text size", len(ta.data), len(tb.data),
                             f".text size {len(ta.data)} vs {len(tb.data)} bytes")
        offset = first_difference(ta.data, tb.data)
        assert offset is not None
        where = a.symbol_at(ta, offset) or b.symbol_at(tb, offset)
        changed = sum(x != y for x, y in zip(ta.data, tb.data, strict=False))
        yield Difference("text", ".text", _words(ta.data, offset), _words(tb.data, offset),
                         f".text differs from offset 0x{offset:x}" + (f" ({where})" if where else ""),
                         detail=f"dwords {_words(ta.data, offset)} vs {_words(tb.data, offset)}; "
                                f"{changed} of {min(len(ta.data), len(tb.data))} common bytes differ",
                         offset=offset, where=where)

"""The ELF container: sections (attributes, then which bytes differ), symbols, the header, and where
everything sits (mostly the consequence of a size change found above, listed so nothing is hidden)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from farm.assure.elfdiff.difference import ABSENT, Difference, first_difference, only, show, show_hex
from farm.assure.elfdiff.parse import Parsed, Section, SymbolKey
from farm.assure.elfdiff.views.base import View
from farm.elf.image import SEGMENT_FIELDS

# (attribute of Section, its ELF name, how to show it)
SectionAttrs = tuple[tuple[str, str, Callable[[Any], str]], ...]
SECTION_ATTRS: SectionAttrs = (("type", "sh_type", str), ("flags", "sh_flags", hex), ("align", "sh_addralign", str),
                               ("entsize", "sh_entsize", str), ("link", "sh_link", str), ("info", "sh_info", str))
SECTION_LAYOUT: SectionAttrs = (("addr", "sh_addr", hex), ("offset", "sh_offset", hex))
SYMBOL_ATTRS = (("value", hex), ("size", str), ("type", str), ("bind", str), ("visibility", str), ("section", str))
HEADER_FIELDS = ("EI_CLASS", "EI_DATA", "EI_VERSION", "e_type", "e_version", "e_entry", "e_ehsize",
                 "e_phentsize", "e_phnum", "e_shentsize", "e_shnum", "e_shstrndx")
LAYOUT_FIELDS = ("e_phoff", "e_shoff")


def _section_attrs(name: str, sa: Section, sb: Section, attrs: SectionAttrs, level: str) -> Iterator[Difference]:
    for attr, label, shown in attrs:
        va, vb = getattr(sa, attr), getattr(sb, attr)
        if va != vb:
            yield Difference(level, f"{name} {label}", va, vb, f"section {name} {label} {shown(va)} vs {shown(vb)}")


def _section_data(a: Parsed, name: str, sa: Section, sb: Section) -> Difference:
    offset = first_difference(sa.data, sb.data)
    assert offset is not None
    where = a.symbol_at(sa, offset)
    sizes = f"size {len(sa.data)} vs {len(sb.data)} bytes, " if len(sa.data) != len(sb.data) else ""
    return Difference("data", f"{name} bytes", len(sa.data), len(sb.data),
                      f"section {name} differs ({sizes}from offset 0x{offset:x}" + (f", {where})" if where else ")"),
                      offset=offset, where=where)


class Sections(View):
    """Sections on one side only, each common section's attributes, and which sections' bytes differ."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        for name in only(a.sections, b.sections):
            yield Difference("section", name, a.sections[name].size, ABSENT,
                             f"section {name} only in A ({a.sections[name].size} bytes)")
        for name in only(b.sections, a.sections):
            yield Difference("section", name, ABSENT, b.sections[name].size,
                             f"section {name} only in B ({b.sections[name].size} bytes)")
        for name, sa in a.sections.items():
            sb = b.sections.get(name)
            if sb is None:
                continue
            yield from _section_attrs(name, sa, sb, SECTION_ATTRS, "section")
            if name != ".text" and sa.data != sb.data:  # .text has its own, more detailed view
                yield _section_data(a, name, sa, sb)


def _symbol_label(key: SymbolKey) -> str:
    table, name, dup = key
    label = name or "(unnamed)"
    label += f"#{dup}" if dup else ""
    return label if table == ".symtab" else f"{label} ({table})"


class Symbols(View):
    """Symbols on one side only, then each common symbol's attributes."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        for key in only(a.symbols, b.symbols):
            yield Difference("symbol", _symbol_label(key), key[1], ABSENT, f"symbol {_symbol_label(key)} only in A")
        for key in only(b.symbols, a.symbols):
            yield Difference("symbol", _symbol_label(key), ABSENT, key[1], f"symbol {_symbol_label(key)} only in B")
        for key, sa in a.symbols.items():
            sb = b.symbols.get(key)
            if sb is None:
                continue
            for attr, shown in SYMBOL_ATTRS:
                va, vb = getattr(sa, attr), getattr(sb, attr)
                if va != vb:
                    label = _symbol_label(key)
                    yield Difference("symbol", f"{label} {attr}", va, vb,
                                     f"symbol {label} {attr} {shown(va)} vs {shown(vb)}")


class ElfHeader(View):
    """The ELF header's fields; the two table offsets count as layout."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        for key in HEADER_FIELDS + LAYOUT_FIELDS:
            va, vb = getattr(a.header, key), getattr(b.header, key)
            if va != vb:
                level = "layout" if key in LAYOUT_FIELDS else "header"
                shown = show_hex if key in ("e_entry", *LAYOUT_FIELDS) else show
                yield Difference(level, key, va, vb, f"{key} {shown(va)} vs {shown(vb)}")


class Layout(View):
    """Where things sit: section order, addresses and offsets, program headers."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        order_a = [n for n in a.sections if n in b.sections]
        order_b = [n for n in b.sections if n in a.sections]
        if order_a != order_b:
            yield Difference("layout", "section order", order_a, order_b, "sections are in a different order")
        for name, sa in a.sections.items():
            if name in b.sections:
                yield from _section_attrs(name, sa, b.sections[name], SECTION_LAYOUT, "layout")
        for i, (pa, pb) in enumerate(zip(a.segments, b.segments, strict=False)):
            for key in SEGMENT_FIELDS:
                va, vb = getattr(pa, key), getattr(pb, key)
                if va != vb:
                    yield Difference("layout", f"segment[{i}] {key}", va, vb,
                                     f"program header {i} ({pa.p_type}) {key} {show_hex(va)} vs {show_hex(vb)}")

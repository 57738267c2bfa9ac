"""The comparison: parse both objects, walk every view, then say where in the raw bytes they differ when
no view could, and rank the whole list most explanatory first."""

from __future__ import annotations

from collections.abc import Iterator

from farm.assure.elfdiff.difference import Difference, first_difference
from farm.assure.elfdiff.parse import Parsed, parse
from farm.assure.elfdiff.views import VIEWS


def _readable(side: str, parsed: Parsed | str) -> Iterator[Difference]:
    problem = parsed if isinstance(parsed, str) else parsed.problem
    if problem:
        a, b = (problem, "ok") if side == "A" else ("ok", problem)
        yield Difference("file", "readable", a, b, f"{side} is not a readable code object: {problem}")


def _region(parsed: Parsed | str, offset: int) -> str:
    """Name the part of the file that holds `offset`: header, a table, a section, or padding after one."""
    if isinstance(parsed, str):
        return "unparsed file"
    h = parsed.header
    regions = [(0, h.e_ehsize, "ELF header"),
               (h.e_phoff, h.e_phoff + h.e_phnum * h.e_phentsize, "program header table"),
               (h.e_shoff, h.e_shoff + h.e_shnum * h.e_shentsize, "section header table")]
    regions += [(s.offset, s.offset + s.size, f"section {s.name}") for s in parsed.sections.values()
                if s.type != "SHT_NOBITS" and s.size]
    for start, end, label in regions:
        if start <= offset < end:
            return f"{label}+0x{offset - start:x}" if start else label
    before = [(end, label) for _, end, label in regions if end <= offset]
    return f"padding after {max(before)[1]}" if before else "outside every known region"


def _raw(a: bytes, b: bytes, pa: Parsed | str, found: list[Difference]) -> Iterator[Difference]:
    if len(a) != len(b):
        yield Difference("raw", "file size", len(a), len(b), f"file size {len(a)} vs {len(b)} bytes")
    if any(d.level not in ("file", "raw") for d in found):
        return  # the structured differences already say where
    offset = first_difference(a, b)
    if offset is not None:
        region = _region(pa, offset)
        yield Difference("raw", "first differing file offset", a[offset:offset + 8].hex(), b[offset:offset + 8].hex(),
                         f"bytes differ from file offset 0x{offset:x} ({region})", offset=offset, where=region)


def compare(a: bytes, b: bytes) -> list[Difference]:
    """Every difference between code objects `a` and `b`, most explanatory first; [] when identical."""
    if a == b:
        return []
    pa, pb = parse(a), parse(b)
    found = [*_readable("A", pa), *_readable("B", pb)]
    if isinstance(pa, Parsed) and isinstance(pb, Parsed):
        for view in VIEWS:
            found += view.differences(pa, pb)
    found += _raw(a, b, pa, found)
    return sorted(found, key=lambda d: d.rank)  # stable: each level keeps its own order

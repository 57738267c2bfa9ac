"""Explain exactly what differs between two AMDGPU code objects, most explanatory difference first.

`farm diff A.hsaco B.hsaco [--json]`. An audit that rebuilds a shipped object only learns "the hashes
differ"; this names the level (linker identity, target, kernel metadata, kernel descriptor, .text,
sections, symbols, header, layout, raw bytes), the field and both values.

  parse       both files, read once with pyelftools into plain values
  views/      one small class per view of a code object; the comparison walks their list
  comparison  the walk, the raw-byte fallback, the ranking
  rendering   the summary line, the full listing, JSON records
  command     `farm diff` itself
"""

from __future__ import annotations

from farm.assure.elfdiff.command import main
from farm.assure.elfdiff.comparison import compare
from farm.assure.elfdiff.difference import LEVELS, Difference
from farm.assure.elfdiff.rendering import DifferenceRecord, render, summary, to_json

__all__ = ["LEVELS", "Difference", "DifferenceRecord", "compare", "main", "render", "summary", "to_json"]

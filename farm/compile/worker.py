"""The isolated compile process: `python -m farm.compile.worker REQUEST.json RESULT.bin`.

It compiles one row and writes the ELF to RESULT.bin and the sources it read to RESULT.bin.json.
An LLVM abort kills only this process; its stderr reaches the user through the parent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    from .lowering import compile_row

    elf, sources = compile_row(request)
    result = Path(argv[1])
    result.write_bytes(elf)
    result.with_suffix(".json").write_text(json.dumps({"sources": sources}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

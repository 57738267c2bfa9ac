"""The isolated compile process: `python -m farm.compile.worker REQUEST.json RESULT.bin`.

It compiles one row and writes the ELF to RESULT.bin, and the sources it read and its peak memory
to RESULT.bin.json.
An LLVM abort kills only this process; its stderr reaches the user through the parent.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    from .lowering import compile_row

    elf, sources = compile_row(request)
    result = Path(argv[1])
    result.write_bytes(elf)
    # Peak resident memory of this compile process (KiB on Linux; a forked child counts the pages
    # it shares with its warm parent too).
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result.with_suffix(".json").write_text(json.dumps({"sources": sources, "max_rss_kib": peak_kib}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

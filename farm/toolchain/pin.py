"""`python -m farm.toolchain.pin`: which pinned distributions differ from their RECORD.

scripts/setup.sh runs it and reinstalls each distribution it names (the first word of each line); the
exit status is 1 when any differs. The pin itself: shapes.py (its fields), installed.py (what is
installed, in its shape), compare.py (differences from it), pin_file.py (the file `farm pin` writes).
"""

from __future__ import annotations

import sys

from farm.core.private import private_dir
from farm.toolchain.distributions import damaged


def main() -> int:
    bad = damaged(private_dir("toolchain-cache"))
    for name, content in sorted(bad.items()):
        files = sorted(content.edited) + sorted(content.added)
        # stdout: setup.sh reads these lines (the distribution's name first).
        print(f"{name} {content.version}: " + (", ".join(files[:5]) if files else "not installed")
              + (f" (+{len(files) - 5} more)" if len(files) > 5 else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Import modules from kernels_src/ (the families' spec and generator modules)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType


def import_kernel_module(kernels_dir: Path, dotted: str) -> ModuleType:
    """Import `dotted` with `kernels_dir` first on sys.path, never a same-named module from elsewhere."""
    root = str(kernels_dir.resolve())
    top = dotted.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None and not str(getattr(loaded, "__file__", "") or "").startswith(root):
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[name]
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(dotted)

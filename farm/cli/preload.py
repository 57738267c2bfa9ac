"""A build's compile code (Ray: ~0.8 s to import) imported in the background while the build plans.

A build imports Ray only when it has rows to compile (farm/build.py), after its planning. When an object
of a selected row is missing it will almost surely compile, so the import starts in a thread as soon as
the rows are known and runs beside the planning. It loads code, never data: the plan is made exactly as
before. A build that ends up compiling nothing waits for the import at its end (`finish`): a thread still
importing must not be cut off at interpreter exit.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable

from farm.table.config import FarmConfig
from farm.table.rows import Row

log = logging.getLogger(__name__)

# What farm/build.py imports when it compiles (farm.execute sets Ray's switches before Ray loads).
MODULES = ("farm.execute.executor", "farm.execute.standing")


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 (the build's own import later names it properly)
            log.debug("preloading %s failed: %s", name, exc)
            return


def will_compile(cfg: FarmConfig, rows: Iterable[Row]) -> bool:
    """Is an object of these rows missing (then the build compiles it)? Only a hint: planning decides."""
    return any(not (cfg.outputs_dir / row.op / row.target / row.file_name).is_file() for row in rows)


def start(cfg: FarmConfig, rows: Iterable[Row]) -> threading.Thread | None:
    """Start importing the compile code in the background when the build will probably compile."""
    if not will_compile(cfg, rows):
        return None
    thread = threading.Thread(target=_import_all, name="farm-preload", daemon=True)
    thread.start()
    return thread


def finish(thread: threading.Thread | None) -> None:
    if thread is not None:
        thread.join()

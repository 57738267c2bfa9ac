"""farm golden: under the tree's lock, require the selected ops' whole table built and clean, then write
`<outputs_dir>.sha256` from the tree (farm/assure/golden.py), `<outputs_dir>.code.sha256` from its manifests
(the farm code they record, farm/assure/golden_code.py) and the DVC pointer of the same tree."""

from __future__ import annotations

import sys
from typing import TextIO

from farm.assure.check import check
from farm.assure.golden import golden_path, tree_digests
from farm.assure.golden import render as render_golden
from farm.assure.golden_code import code_path, recorded_code
from farm.assure.golden_code import render as render_code
from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError
from farm.publish.pointer import record_pointer
from farm.store.lock import command_line, lock_wait, tree_lock
from farm.table.config import FarmConfig
from farm.table.rows import Row


def seal_golden(cfg: FarmConfig, rows: list[Row], every: list[Row], out: TextIO = sys.stdout) -> int:
    """Record the golden digests and the pointer; the report (or the refusal) goes to `out`. Exit status."""
    if rows != every:
        raise FarmError("farm golden records the whole table of the selected ops, not a part of it",
                        "drop targets=/dtypes=/names= (ops=[...] may stay)")
    with tree_lock(cfg.outputs_dir, command_line(), wait_s=lock_wait(cfg)):
        found = check(cfg, rows, every)
        dirs = {(r.op, r.target) for r in rows}
        present = {tuple(p.relative_to(cfg.outputs_dir).parts) for p in cfg.outputs_dir.glob("*/*")}
        found += [f"{cfg.outputs_dir / '/'.join(d)}: no selected row builds this directory"
                  for d in sorted(present - dirs)]
        for line in found:
            print(f"DRIFT {line}", file=out)
        if found:
            print(f"refusing to record golden digests: {len(found)} problem(s); `farm build`, then `farm golden`",
                  file=out)
            return 1
        digests = tree_digests(cfg.outputs_dir)
        code = recorded_code(cfg, sorted(dirs))
        path = golden_path(cfg)
        write_text_atomic(path, render_golden(digests))
        write_text_atomic(code_path(cfg), render_code(code))
        pointer = record_pointer(cfg)
    print(f"wrote {path}: {len(digests)} files ({len(rows)} objects in {len(dirs)} directories)", file=out)
    print(f"wrote {code_path(cfg).name}: the {len(code)} farm files those manifests record", file=out)
    print(f"wrote {path.with_suffix('.dvc').name}: md5 {pointer.md5} ({pointer.nfiles} files); commit all three "
          f"({path.name}, {code_path(cfg).name}, {path.with_suffix('.dvc').name})", file=out)
    return 0

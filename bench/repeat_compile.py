"""Compile one row many times, each in a fresh isolated process, and print how often each output occurs.

    python bench/repeat_compile.py op/target/name [runs=48] [dump_ir=false]

A reproducible compiler gives one SHA256. This measured the problem in docs/reproducibility.md ("LLVM codegen
runs in a process of its own"): before LLVM codegen ran in a process of its own, sdpa_rdna/gfx11-generic/
sdpa_rdna_f16_d128_mask-causal_bias-none gave a second output in 2 of 48 runs (14 of 50 with
dump_ir=true, which also keeps FlyDSL's per-stage IR of every run under the printed directory, to
compare stage by stage; FlyDSL's dump mode runs the pipeline stage by stage in the compile process,
so it bypasses the separate codegen process and still shows the old behaviour).
"""

from __future__ import annotations

import collections
import hashlib
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fresh_compile import compile_fresh

from farm.table import config as config_mod
from farm.table.expand import fresh_rows


def main(args: list[str]) -> int:
    keys = [a for a in args if "=" not in a]
    opts = dict(a.split("=", 1) for a in args if "=" in a)
    if len(keys) != 1 or set(opts) - {"runs", "dump_ir"}:
        raise SystemExit(__doc__)
    op, target, name = keys[0].split("/")
    cfg = config_mod.load(config_mod.find_project_root(), [f"ops=[{op}]", f"targets=[{target}]"])
    rows, _ = fresh_rows(cfg)
    row = next((r for r in rows if r.name == name), None)
    if row is None:
        raise SystemExit(f"no row {keys[0]} in instances/")
    root = Path(tempfile.mkdtemp(prefix="farm-repeat-"))
    dump = opts.get("dump_ir", "false") == "true"

    def one(i: int) -> str:
        work, out = root / f"run{i:03d}", root / f"run{i:03d}" / "object.bin"
        extra = {"FLYDSL_DUMP_IR": "1", "FLYDSL_DUMP_DIR": str(work / "dump")} if dump else {}
        compile_fresh(cfg, row, work, out, extra)
        return hashlib.sha256(out.read_bytes()).hexdigest()

    runs = int(opts.get("runs", "48"))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        digests = list(pool.map(one, range(runs)))
    for digest, count in collections.Counter(digests).most_common():
        where = [f"run{i:03d}" for i, d in enumerate(digests) if d == digest][:5]
        print(f"{count:4d} x {digest[:16]}  e.g. {', '.join(where)}")
    print(f"runs in {root}")
    return 0 if len(set(digests)) == 1 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

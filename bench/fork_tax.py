"""Where a forked compile's extra time goes: the same rows compiled in one long-lived process and each in a
fork of a preloaded process (the zygote's imports, nothing compiled), in one run, interleaved.

    python bench/fork_tax.py [--rows 8] [--rounds 3] [--env K=V ...] [farm selection overrides]

Ways, per round (all with LLVM codegen in the compile process, so only the fork differs):
    in-process  one fork that compiles every row twice; the second pass is timed (a warm process);
    fork        one fresh fork of the preloaded process per row (the farm's compile child);
    fork+import the same, after the parent also imported the rows' generator module (the import leaves
                the child: measures whether per-row module imports are part of the fork's cost);
    fork+context the same, with the MLIR context FlyDSL compiles in made by the parent before it forks
                (unused there), instead of by each child.
Prints per way the median per row of: the generator import, front end, MLIR passes, codegen with link,
total, user and system CPU seconds, and minor page faults. `--env` adds a variable to the compile
environment (e.g. GLIBC_TUNABLES=glibc.malloc.hugetlb=1) to compare a setting against the default.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import resource
import statistics
import sys
import time
from pathlib import Path

import probe_rows
from in_fork import in_fork

KEYS = ("import", "front_end", "mlir_passes", "codegen+link", "total", "user", "system", "minflt")


def _one(job) -> dict[str, float | str]:  # noqa: ANN001 (a farm.contract.CompileJob)
    from farm.worker import flydsl_compat
    from farm.worker.phases import in_process_phases

    flydsl_compat.use_farm_backend(job.request.target.mlir_chipset)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with in_process_phases() as row:
        generator = importlib.import_module(job.request.generator)
        imported = time.perf_counter()
        launcher, args = generator.launcher_and_args(dict(job.request.knobs))
        launcher(*args)
        elf = flydsl_compat.elf_from_compiled(launcher)
    ended, after = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    found = {p.name: p.seconds for p in row.phases}
    return found | {"import": imported - started, "total": ended - started,
                    "user": after.ru_utime - before.ru_utime, "system": after.ru_stime - before.ru_stime,
                    "minflt": after.ru_minflt - before.ru_minflt, "key": job.request.key,
                    "sha256": hashlib.sha256(elf).hexdigest()}


def child(jobs_file: str, rounds: int) -> int:
    from farm.worker import flydsl_compat, zygote
    from farm.worker.farm_code import remember_loaded

    jobs = probe_rows.read_jobs(jobs_file)
    zygote.preload()
    remember_loaded()
    flydsl_compat.use_in_process_codegen()
    gc.collect()
    gc.freeze()

    def after_import() -> list:
        importlib.import_module(jobs[0].request.generator)
        gc.collect()
        gc.freeze()
        return [in_fork(lambda j=j: _one(j)) for j in jobs]

    def premade_context() -> list:
        flydsl_compat.use_premade_context()
        gc.collect()
        gc.freeze()
        return [in_fork(lambda j=j: _one(j)) for j in jobs]

    found: dict[str, list[dict]] = {"in-process": [], "fork": [], "fork+import": [],
                                                "fork+context": []}
    for _ in range(rounds):
        found["in-process"] += in_fork(lambda: [[_one(j) for j in jobs], [_one(j) for j in jobs]][1])
        found["fork"] += [in_fork(lambda j=j: _one(j)) for j in jobs]
        found["fork+import"] += in_fork(after_import)
        found["fork+context"] += in_fork(premade_context)
    print(f"  {'way':12}" + "".join(f"{k:>13}" for k in KEYS) + "   (median per row, seconds; faults)")
    for name, rows in found.items():
        print(f"  {name:12}" + "".join(f"{statistics.median(r.get(k, 0.0) for r in rows):13.4f}" for k in KEYS))
    objects = {(r["key"], r["sha256"]) for rows in found.values() for r in rows}
    same = len(objects) == len(jobs)
    print(f"  objects: {'every way and round gave the same bytes per row' if same else 'DIFFER between ways'} "
          f"({len(objects)} distinct for {len(jobs)} rows)")
    return 0 if same else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(argv[1], int(argv[2]))
    args = probe_rows.parse(argv, default_rows=8)
    rounds = 3
    if "--rounds" in args.rest:
        at = args.rest.index("--rounds")
        rounds = int(args.rest[at + 1])
        del args.rest[at:at + 2]
    return probe_rows.run_child(Path(__file__).resolve(), args, args.rest, [str(rounds)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

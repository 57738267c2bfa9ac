"""Do a row's bytes depend on the history of the process that traced it? The measurement that must come
before tracing rows in batches (one front-end process for several rows, codegen still one fresh fork per row).

    python bench/front_end_history.py [rows=N] [farm selection overrides]     e.g. rows=12 ops=[rmsnorm]

For every (op, target) of the selection, its first N rows (N=0: all) are compiled three ways, in two processes
at a time:
  isolated  the farm's way: each row in its own fork of a warm compile server (farm/worker/isolate.py);
  batch     every row of the group traced in one process, in table order (its kernel modules imported once,
            FlyDSL's and MLIR's state carried from row to row), each row's codegen in a fresh fork of the
            same codegen server the farm uses;
  reversed  the same in reverse order.
It prints, per group, whether the three ways made the same object for every row, whether the objects match
outputs.sha256, whether the two batches handed codegen the same module text, and the mean front-end seconds
per row of each way (what tracing in a batch would save). Exit code 1 when any row's object differs.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fresh_compile import private_env

from farm.assure import golden as golden_mod
from farm.build import compile_request
from farm.contract import CompileJob, CompileRequest
from farm.plan.sources import collect
from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.table.rows import Row

HERE = Path(__file__).resolve()
WAYS = ("isolated", "batch", "reversed")


@dataclass(frozen=True)
class RowOutcome:
    """One row compiled one way: its object's and hand-off module's SHA256 and its front-end seconds."""

    object_sha: str
    module_sha: str  # "" for the isolated way (its row directory is gone with the module)
    front_end_s: float


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _front_end_seconds(phases: list[list]) -> float:
    """This row's front end: from its (last) front_end switch to the next (a process that compiled several rows
    keeps every row's switches in its timeline)."""
    last = max(i for i, (_, name) in enumerate(phases) if name == "front_end")
    return phases[last + 1][0] - phases[last][0]


def run_isolated(requests: list[CompileRequest], kernels: Path) -> dict[str, RowOutcome]:
    """The farm's own path: `compile_isolated` with a warm server, one fork per row."""
    from farm.worker.isolate import compile_isolated
    from farm.worker.warm import WarmServer

    sources = collect(kernels)
    server = WarmServer()
    found = {}
    try:
        for request in requests:
            result = compile_isolated(request, sources, 1800, server)
            if not result.ok or result.elf is None:
                raise SystemExit(f"isolated compile of {request.key} failed: {result.error}")
            front = sum(p.seconds for p in result.phases if p.name == "front_end")
            found[request.key] = RowOutcome(_sha(result.elf), "", round(front, 4))
    finally:
        server.stop()
    return found


def run_batch(requests: list[CompileRequest], kernels: Path, scratch: Path) -> dict[str, RowOutcome]:
    """Every row traced in this one process, each row's codegen in a fork of one codegen server."""
    from farm.worker import zygote
    from farm.worker.binary_step import SERVER_ENV
    from farm.worker.main import main
    from farm.worker.phases import COMPILE_FILE, PHASES_DIR_ENV
    from farm.worker.warm import Zygote

    linker = requests[0].linker
    servers = Zygote(linker)  # only its codegen server is used: the tracing happens here
    zygote.preload()
    # As the warm server and its forks do: what was imported is out of the collector's reach, and a compile
    # runs without cyclic GC (a full collection over torch's objects would swamp the front-end times).
    gc.collect()
    gc.freeze()
    gc.disable()
    found = {}
    try:
        for i, request in enumerate(requests):
            work = scratch / f"row{i:04d}"
            env = private_env(work, request.target, linker) | {SERVER_ENV: str(servers.binary_socket),
                                                               PHASES_DIR_ENV: str(work)}
            CompileJob(request, str(kernels)).write(work / "job.json")
            os.environ.clear()
            os.environ.update(env)
            tempfile.tempdir = None
            os.chdir(work)
            main([str(work / "job.json"), str(work / "object.bin")])
            phases = json.loads((work / COMPILE_FILE).read_text())
            found[request.key] = RowOutcome(_sha((work / "object.bin").read_bytes()),
                                            _sha((work / "binary-in.mlir").read_bytes()),
                                            round(_front_end_seconds(phases), 4))
    finally:
        servers.stop()
    return found


def _worker(args: list[str]) -> int:
    """`--worker WAY JOB OUT`: compile the job's requests one way, write {key: RowOutcome} to OUT."""
    way, job_path, out = args
    job = json.loads(Path(job_path).read_text())
    requests = [CompileRequest.from_json(r) for r in job["requests"]]
    kernels = Path(job["kernels"])
    if way == "isolated":
        found = run_isolated(requests, kernels)
    else:
        # The rows' directories go beside the job, under the directory the run prints.
        found = run_batch(requests if way == "batch" else list(reversed(requests)), kernels,
                          Path(job_path).with_suffix(".rows"))
    Path(out).write_text(json.dumps({k: v.__dict__ for k, v in found.items()}))
    return 0


def main(args: list[str]) -> int:
    if args[:1] == ["--worker"]:
        return _worker(args[1:])
    opts = dict(a.split("=", 1) for a in args if a.startswith("rows="))
    per_group = int(opts.get("rows", "0"))
    overrides = [a for a in args if not a.startswith("rows=")]
    root = config_mod.find_project_root()
    cfg = config_mod.load(root, overrides)
    rows, _ = fresh_rows(cfg)
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.op, row.target), []).append(row)
    work = Path(tempfile.mkdtemp(prefix="farm-history-"))
    recorded = golden_mod.load(cfg)
    golden = recorded.sha256 if recorded is not None else {}

    def one(task: tuple[tuple[str, str], str]) -> tuple[tuple[str, str], str, dict[str, RowOutcome]]:
        (op, target), way = task
        chosen = groups[(op, target)][:per_group or None]
        job = work / f"{op}-{target}-{way}.json"
        job.write_text(json.dumps({"kernels": str(cfg.kernels_dir),
                                   "requests": [compile_request(cfg, r).to_json() for r in chosen]}))
        out = job.with_suffix(".out.json")
        proc = subprocess.run([sys.executable, str(HERE), "--worker", way, str(job), str(out)],
                              capture_output=True, text=True, cwd=root)
        if proc.returncode != 0:
            raise SystemExit(f"{op}/{target} {way} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        found = {k: RowOutcome(**v) for k, v in json.loads(out.read_text()).items()}
        return (op, target), way, found

    tasks = [(g, way) for g in sorted(groups) for way in WAYS]
    print(f"history: {len(groups)} groups, {sum(len(v[:per_group or None]) for v in groups.values())} rows, "
          f"3 ways, in {work}", flush=True)
    results: dict[tuple[str, str], dict[str, dict[str, RowOutcome]]] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for group, way, found in pool.map(one, tasks):
            results.setdefault(group, {})[way] = found
            if len(results[group]) == len(WAYS):
                _print_group(group, results[group], golden, groups)
    differing = sum(_differing(r) for r in results.values())
    total = sum(len(r["isolated"]) for r in results.values())
    means = {way: _mean([o.front_end_s for r in results.values() for o in r[way].values()]) for way in WAYS}
    print(f"rows={total} differing={differing} front_end_isolated={means['isolated']:.3f} "
          f"front_end_batch={means['batch']:.3f} front_end_reversed={means['reversed']:.3f}")
    return 1 if differing else 0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _differing(by_way: dict[str, dict[str, RowOutcome]]) -> int:
    return sum(len({by_way[w][k].object_sha for w in WAYS}) != 1 for k in by_way["isolated"])


def _print_group(group: tuple[str, str], by_way: dict[str, dict[str, RowOutcome]], golden: dict[str, str],
                 groups: dict[tuple[str, str], list[Row]]) -> None:
    op, target = group
    keys = list(by_way["isolated"])
    rel = {r.key: r.relpath() for r in groups[group]}
    same_module = sum(by_way["batch"][k].module_sha == by_way["reversed"][k].module_sha for k in keys)
    matching = sum(golden.get(rel[k]) == by_way["isolated"][k].object_sha for k in keys)
    fronts = "  ".join(f"{w} {_mean([o.front_end_s for o in by_way[w].values()]):.3f}" for w in WAYS)
    print(f"  {op}/{target}: {len(keys)} rows, objects differing across ways {_differing(by_way)}, "
          f"batch modules equal {same_module}/{len(keys)}, isolated = outputs.sha256 {matching}/{len(keys)}; "
          f"front end s/row: {fronts}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

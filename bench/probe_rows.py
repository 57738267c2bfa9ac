"""Shared by bench/fork_tax.py, handoff_format.py and codegen_server.py: a few rows of a selection as compile
jobs, a child interpreter that runs a probe on them in the farm's own compile environment, and the modules
their compiles hand to codegen (`captured_handoffs`).

`python bench/X.py [--rows N] [--env K=V ...] [farm selection overrides]` picks N rows spread over the
selection, writes each one's CompileJob (sources read in place from kernels_src/) into a temporary
directory, and runs `python bench/X.py --child JOBS.json ...` with exactly the environment a farm compile
gets (farm/worker/environment.py `child_environment`), plus any --env variables given.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fresh_compile import private_env

from farm.build import compile_request
from farm.contract import CompileJob
from farm.table import config as config_mod
from farm.table.expand import fresh_rows


@dataclass(frozen=True)
class ProbeArgs:
    rows: int
    extra_env: dict[str, str]
    rest: list[str]  # the farm selection overrides and the probe's own flags


def parse(argv: list[str], default_rows: int) -> ProbeArgs:
    rows, extra, rest = default_rows, {}, []
    items = iter(argv)
    for arg in items:
        if arg == "--rows":
            rows = int(next(items))
        elif arg == "--env":
            key, _, value = next(items).partition("=")
            extra[key] = value
        else:
            rest.append(arg)
    return ProbeArgs(rows, extra, rest)


def run_child(script: Path, args: ProbeArgs, overrides: list[str], child_args: list[str]) -> int:
    """Write the jobs for `args.rows` rows of the selection and run `script --child JOBS.json *child_args`."""
    cfg = config_mod.load(config_mod.find_project_root(), overrides)
    rows, _ = fresh_rows(cfg)
    if not rows:
        raise SystemExit("the selection has no rows")
    picked = rows[:: max(1, len(rows) // args.rows)][: args.rows]
    with tempfile.TemporaryDirectory(prefix="farm-probe-") as tmp:
        work = Path(tmp)
        jobs = []
        for i, row in enumerate(picked):
            (work / f"row{i}").mkdir()
            CompileJob(compile_request(cfg, row), str(cfg.kernels_dir)).write(work / f"row{i}" / "job.json")
            jobs.append(str(work / f"row{i}" / "job.json"))
        first = compile_request(cfg, picked[0])
        env = private_env(work / "env", first.target, cfg.toolchain_pin.get("linker")) | args.extra_env
        (work / "jobs.json").write_text(json.dumps(jobs))
        print(f"{len(picked)} rows: {', '.join(r.key for r in picked)}", flush=True)
        return subprocess.run([sys.executable, str(script), "--child", str(work / "jobs.json"), *child_args],
                              cwd=work / "env", env=env).returncode


def read_jobs(path: str) -> list[CompileJob]:
    """In the child: the jobs, with the kernels root on sys.path as a compile process has it."""
    jobs = [CompileJob.read(Path(p)) for p in json.loads(Path(path).read_text())]
    sys.path.insert(0, jobs[0].kernels_root)
    return jobs


def captured_handoffs(jobs_file: str) -> list[tuple[str, str]]:
    """In the child: compile each job as a farm compile does, up to the hand-off to codegen, and return the
    (module text, binary pass fragment) each one handed over (codegen then runs here, in a fresh context)."""
    import importlib

    from farm.worker import flydsl_compat, flydsl_mlir, zygote
    from farm.worker.phases import Timeline

    jobs = read_jobs(jobs_file)
    zygote.preload()
    captured: list[tuple[str, str]] = []

    def capture(text: str, fragment: str) -> str:
        captured.append((text, fragment))
        return flydsl_mlir.run_binary_pass(text, f"builtin.module({fragment})", Timeline())

    flydsl_compat.use_external_codegen(capture)
    for job in jobs:
        flydsl_compat.use_farm_backend(job.request.target.mlir_chipset)
        generator = importlib.import_module(job.request.generator)
        launcher, args = generator.launcher_and_args(dict(job.request.knobs))
        launcher(*args)
        flydsl_compat.elf_from_compiled(launcher)
    return captured

"""One row compiled in a fresh interpreter, in the farm's own isolated environment (for the bench scripts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from farm.build import compile_request
from farm.contract import CompileJob, TargetFacts
from farm.table.config import FarmConfig
from farm.table.rows import Row
from farm.toolchain.linker import write_linker_shim
from farm.toolchain.shapes import LinkerPin
from farm.worker.environment import child_environment


def private_env(work: Path, target: TargetFacts, linker: LinkerPin | None) -> dict[str, str]:
    """The environment the farm gives a compile, rooted at `work` (created with its home, tmp and linker shim)."""
    for sub in ("home", "tmp"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    write_linker_shim(work / "rocm", linker)
    return child_environment(work, target)


def compile_fresh(cfg: FarmConfig, row: Row, work: Path, out: Path, extra_env: dict[str, str] | None = None) -> None:
    """A fresh compile process (`python -m farm.worker.zygote --fresh`) for `row` in `work`, writing the
    object to `out`; SystemExit on failure."""
    request = compile_request(cfg, row)
    env = private_env(work, request.target, cfg.toolchain_pin.get("linker")) | (extra_env or {})
    CompileJob(request, str(cfg.kernels_dir)).write(work / "job.json")
    proc = subprocess.run([sys.executable, "-m", "farm.worker.zygote", "--fresh", str(work / "job.json"), str(out)],
                          cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fresh compile of {row.key} failed:\n{proc.stderr[-3000:]}")
    out.with_suffix(".json").unlink()  # the worker's side file (sources read, peak memory)

"""Way (a) of bench/throughput.py: one process for one target compiling its rows in sequence, the way
a per-target generator script works (imports paid once, no isolation between rows).

`python bench/sequential_generator.py JOB.json` with JOB = {"target": {...}, "kernels_root": ...,
"requests": [CompileRequest as JSON, ...], "out_dir": ..., "result_file": ...};
writes <out_dir>/<key with / as __>.hsaco and the result file: {"seconds": {key: the pure compile seconds
(trace, lower, codegen, link)}, "phases": {key: [{"name", "start_unix", "seconds"}, ...]}} (the phases of
farm/contract.py, as far as one process has them: front_end, mlir_passes, codegen+link).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any


def _phase_helper() -> Callable[[], AbstractContextManager[Any]] | None:
    """farm.worker.phases.in_process_phases, when this checkout has it (None: no in-process phases)."""
    try:
        from farm.worker import phases
    except ImportError:
        return None
    return getattr(phases, "in_process_phases", None)


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    import torch  # noqa: F401  (the imports a generator pays once)

    from farm.contract import CompileRequest, TargetFacts
    from farm.worker import flydsl_compat

    flydsl_compat.use_farm_backend(TargetFacts.from_json(job["target"]).mlir_chipset)
    # LLVM codegen stays in this process, as in a generator script; with the farm's phase helper it runs
    # as a step of its own (FlyDSL's split before the binary pass), so its time can be told apart.
    timed = _phase_helper()
    if timed is not None:
        flydsl_compat.use_in_process_codegen()
    sys.path.insert(0, job["kernels_root"])
    out = Path(job["out_dir"])
    seconds: dict[str, float] = {}
    phases: dict[str, list[Any]] = {}  # the contract's Phase as JSON, per row
    for request in map(CompileRequest.from_json, job["requests"]):
        started = time.perf_counter()
        with timed() if timed is not None else nullcontext() as row:
            generator = importlib.import_module(request.generator)
            launcher, args = generator.launcher_and_args(dict(request.knobs))
            launcher(*args)
            elf = flydsl_compat.elf_from_compiled(launcher)
        seconds[request.key] = time.perf_counter() - started
        if row is not None:
            phases[request.key] = [phase.to_json() for phase in row.phases]
        (out / (request.key.replace("/", "__") + ".hsaco")).write_bytes(elf)
    Path(job["result_file"]).write_text(json.dumps({"seconds": seconds, "phases": phases}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

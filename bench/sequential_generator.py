"""Way (a) of bench/throughput.py: one process for one target compiling its rows in sequence, the way
a per-target generator script works (imports paid once, no isolation between rows).

`python bench/sequential_generator.py JOB.json` with JOB = {"target": {...}, "kernels_root": ...,
"requests": [CompileRequest as JSON, ...], "out_dir": ..., "seconds_file": ...};
writes <out_dir>/<key with / as __>.hsaco
and the seconds file (the pure compile seconds of each row: trace, lower, link).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    import torch  # noqa: F401  (the imports a generator pays once)

    from farm.contract import CompileRequest, TargetFacts
    from farm.worker import flydsl_compat

    # LLVM codegen stays in this process (no FLYDSL_COMPILE_LLVM_DIR): that is what a generator script does.
    flydsl_compat.use_farm_backend(TargetFacts.from_json(job["target"]).mlir_chipset)
    sys.path.insert(0, job["kernels_root"])
    out = Path(job["out_dir"])
    seconds: dict[str, float] = {}
    for request in map(CompileRequest.from_json, job["requests"]):
        started = time.perf_counter()
        generator = importlib.import_module(request.generator)
        launcher, args = generator.launcher_and_args(dict(request.knobs))
        launcher(*args)
        elf = flydsl_compat.elf_from_compiled(launcher)
        seconds[request.key] = time.perf_counter() - started
        (out / (request.key.replace("/", "__") + ".hsaco")).write_bytes(elf)
    Path(job["seconds_file"]).write_text(json.dumps(seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

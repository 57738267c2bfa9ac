"""The body of an isolated compile process: compile one job, leave the object and its record.

Both kinds of compile process run it: a fork of the warm server, and a fresh interpreter
(`python -m farm.worker.zygote --fresh JOB.json RESULT.bin`); see farm/worker/zygote.py.
It writes the ELF to RESULT.bin, and to RESULT.json a `ProcessRecord` (farm/contract.py): what it consulted
under the kernels root (files read, lookups made), the farm code it ran (every farm module the process
loaded, the warm server's included), its peak memory and the LLVM options the kernel compiled with.
Beside them, whether it succeeded or not, the moments its time went to another phase
(farm/worker/phases.py): a failed compile's phases end where it failed.
An LLVM abort kills only this process; its stderr reaches the user through the parent.
"""

from __future__ import annotations

import resource
from pathlib import Path

from farm.contract import CompileJob, ProcessRecord
from farm.worker.farm_code import loaded_farm_files
from farm.worker.lowering import compile_row
from farm.worker.phases import COMPILE, COMPILE_FILE


def main(argv: list[str]) -> int:
    """`argv`: the job file and where the object goes (in the row's directory, where the phases go too)."""
    COMPILE.switch("front_end")  # the fork (or the fresh interpreter's imports) ends here
    result = Path(argv[1])
    try:
        job = CompileJob.read(Path(argv[0]))
        compiled = compile_row(job)
        result.write_bytes(compiled.elf)
        # Peak resident memory of this compile process (KiB on Linux; a forked child counts the pages
        # it shares with its warm parent too).
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ProcessRecord(tuple(compiled.consulted.read), tuple(compiled.consulted.lookups), loaded_farm_files(),
                      peak_kib, compiled.llvm_options).write(result.with_suffix(".json"))
    finally:
        COMPILE.write(result.parent / COMPILE_FILE)
    return 0

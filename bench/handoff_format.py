"""The hand-off to codegen in MLIR text (what the farm sends) against MLIR bytecode: their print and parse
times, sizes, and whether codegen gives the same module from both.

    python bench/handoff_format.py [--rows 4] [farm selection overrides]

Each row is compiled once in a child with the farm's compile environment; FlyDSL stops before the binary pass
as in a farm compile, and the gpu.module it hands over is captured (the farm's own text, printed as the farm
prints it). Then, in a fresh context per row: parse the text, print it as text and as bytecode, parse the
bytecode, run the binary pass on both parses and compare the resulting modules; the way back (the module
holding gpu.binary) is printed and parsed both ways too. Prints the mean milliseconds per row.
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import probe_rows

STEPS = ("text_print", "bytecode_print", "text_parse", "bytecode_parse",
         "back_text_print", "back_bytecode_print", "back_text_parse", "back_bytecode_parse")


def _median_ms(work: Callable[[], Any], times: int = 5) -> tuple[float, Any]:
    found, result = [], None
    for _ in range(times):
        started = time.perf_counter()
        result = work()
        found.append((time.perf_counter() - started) * 1000)
    return statistics.median(found), result


def _bytecode(module: Any) -> bytes:
    out = io.BytesIO()
    module.operation.write_bytecode(out)
    return out.getvalue()


def _measure(text: str, fragment: str) -> dict[str, float | bool]:
    from flydsl._mlir import ir
    from flydsl._mlir.passmanager import PassManager

    from farm.worker import flydsl_compat

    with flydsl_compat.mlir_context():
        module = ir.Module.parse(text)
        found: dict[str, float | bool] = {"text_kb": len(text) / 1000}
        found["text_print"], _ = _median_ms(lambda: module.operation.get_asm(enable_debug_info=False))
        found["bytecode_print"], data = _median_ms(lambda: _bytecode(module))
        found["bytecode_kb"] = len(data) / 1000
        found["text_parse"], _ = _median_ms(lambda: ir.Module.parse(text))
        found["bytecode_parse"], from_bytecode = _median_ms(lambda: ir.Module.parse(data))
        for parsed in (module, from_bytecode):
            PassManager.parse(f"builtin.module({fragment})").run(parsed.operation)
        back = module.operation.get_asm()
        found["same"] = back == from_bytecode.operation.get_asm()
        found["back_text_print"], _ = _median_ms(lambda: module.operation.get_asm())
        found["back_bytecode_print"], back_data = _median_ms(lambda: _bytecode(module))
        found["back_text_parse"], _ = _median_ms(lambda: ir.Module.parse(back))
        found["back_bytecode_parse"], _ = _median_ms(lambda: ir.Module.parse(back_data))
    return found


def child(jobs_file: str) -> int:
    captured = probe_rows.captured_handoffs(jobs_file)
    rows = [_measure(text, fragment) for text, fragment in captured]
    print(f"  module: text {statistics.mean(r['text_kb'] for r in rows):.1f} kB, "
          f"bytecode {statistics.mean(r['bytecode_kb'] for r in rows):.1f} kB (mean)")
    for step in STEPS:
        print(f"  {step:20} {statistics.mean(float(r[step]) for r in rows):8.3f} ms per row")
    same = all(r["same"] for r in rows)
    print(f"  codegen from text and from bytecode: {'the same module' if same else 'DIFFERENT modules'} "
          f"for {sum(bool(r['same']) for r in rows)}/{len(rows)} rows")
    return 0 if same else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(argv[1])
    args = probe_rows.parse(argv, default_rows=4)
    return probe_rows.run_child(Path(__file__).resolve(), args, args.rest, [])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

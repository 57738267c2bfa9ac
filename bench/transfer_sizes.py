"""What a build moves through Ray's object store (issue 18: the design note for many nodes).

    .venv/bin/python bench/transfer_sizes.py [selection overrides]      e.g. ops=[rmsnorm] targets=[gfx942]

Measures, with Ray's own serializer (`ray.cloudpickle`, what `.remote()` arguments and results use):
- once per build: the kernel sources (`farm/plan/sources.py collect`, put once, referenced by every call);
- once per node: the farm package Ray's runtime environment ships (`py_modules`), estimated as its files
  (caches left out) zipped with deflate, as Ray packs it;
- per row, to the node: the CompileRequest, for every selected row;
- per row, back to the driver: a real CompileResult (the object, the compiler's output, what it read, the
  toolchain fingerprint, the phases), one fresh-interpreter compile of the first row of each op.
Prints mean and max bytes per row; the last line: `sources_bytes=S farm_zip_bytes=F request_bytes=Q
result_bytes=R` (means).
"""

from __future__ import annotations

import io
import statistics
import sys
import zipfile
from pathlib import Path

from ray import cloudpickle

from farm.build import compile_request
from farm.plan.sources import collect
from farm.table import config as config_mod
from farm.table.expand import fresh_rows
from farm.worker.isolate import compile_isolated

ROOT = Path(__file__).resolve().parent.parent


def _zipped_size(package: Path) -> int:
    """The size of `package` zipped with deflate, caches left out: an estimate of Ray's py_modules upload."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(package.parent))
    return len(buffer.getvalue())


def main(overrides: list[str]) -> None:
    cfg = config_mod.load(config_mod.find_project_root(), overrides)
    rows, _ = fresh_rows(cfg)
    if not rows:
        raise SystemExit("no rows selected")
    sources = collect(cfg.kernels_dir)
    sources_bytes = len(cloudpickle.dumps(sources))
    farm_zip = _zipped_size(ROOT / "farm")
    requests = [len(cloudpickle.dumps(compile_request(cfg, row))) for row in rows]
    results: list[int] = []
    for op in sorted({row.op for row in rows}):
        first = next(row for row in rows if row.op == op)
        result = compile_isolated(compile_request(cfg, first), sources, 600.0, None)
        if not result.ok:
            raise SystemExit(f"{first.key} did not compile: {result.error}")
        size = len(cloudpickle.dumps(result))
        results.append(size)
        print(f"  result of {first.key}: {size} bytes (object {len(result.elf or b'')})", flush=True)
    print(f"rows: {len(rows)}; kernel sources once per build: {sources_bytes} bytes ({len(sources)} files); "
          f"farm package once per node: {farm_zip} bytes zipped")
    print(f"request per row: mean {statistics.mean(requests):.0f}, max {max(requests)} bytes")
    print(f"result per row (one per op): mean {statistics.mean(results):.0f}, max {max(results)} bytes")
    print(f"sources_bytes={sources_bytes} farm_zip_bytes={farm_zip} request_bytes={statistics.mean(requests):.0f} "
          f"result_bytes={statistics.mean(results):.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""A third-party-style FlyDSL kernel family written for these tests ("tilek"), shaped like upstream projects'.

What makes it unlike this project's own families, and like upstream FlyDSL code:
- a nested package under `python/` (`tilek.ops.axpy` imports `tilek.common.layout` by absolute name), with a
  package `__init__.py` that imports its kernels;
- a launcher that is no @flyc.jit function (the class `Axpy`; its __call__ calls the jit function);
- pointer arguments (`fx.Pointer`) on the launcher itself, not tensors;
- per-compile LLVM options, attached as a compile hint (`flyc.compile[{"llvm_options": ...}](launch)`);
- a host-only helper (`benchmark`) whose function-level import needs a module nobody has installed.

`make_upstream` puts it in a git repository, as a local clone of such a project would be. The farm's own two
modules for it (spec and generator) and its op file are below too, as docs/adding-a-family.md writes them.
"""

from __future__ import annotations

from pathlib import Path

from test_vendor import MIT, commit_files, git

URL = "https://example.invalid/tilek.git"

LAYOUT = '''# SPDX-License-Identifier: MIT
"""Element sizes and per-lane unrolling shared by the tilek kernels."""

ELEM_BYTES = {"f32": 4}


def lane_offsets(unroll: int, stride: int) -> list[int]:
    """Element offsets one lane visits: `unroll` elements, `stride` apart."""
    return [k * stride for k in range(unroll)]
'''

AXPY = '''# SPDX-License-Identifier: MIT
"""y[i] = alpha * x[i] + y[i] over n f32 elements, `unroll` elements per lane."""

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import rocdl

from tilek.common.layout import ELEM_BYTES, lane_offsets

_NULL_STREAM = fx.Stream(None)


class Axpy:
    """Host launcher (a plain class, not a @flyc.jit function): builds its jit function once."""

    def __init__(self, block: int, unroll: int, llvm_options: dict | None = None):
        step = ELEM_BYTES["f32"]
        offsets = lane_offsets(unroll, block)

        @flyc.kernel
        def axpy_kernel(x: fx.Pointer, y: fx.Pointer, n: fx.Int32, alpha: fx.Float32):
            base = fx.block_idx.x * (block * unroll) + fx.thread_idx.x
            nbytes = fx.Int64(n) * step
            x_rs = rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(x, num_records_bytes=nbytes))
            y_rs = rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(y, num_records_bytes=nbytes))
            xs = [rocdl.raw_ptr_buffer_load(fx.T.i32, x_rs, (base + off) * step, 0) for off in offsets]
            ys = [rocdl.raw_ptr_buffer_load(fx.T.i32, y_rs, (base + off) * step, 0) for off in offsets]
            for off, xv, yv in zip(offsets, xs, ys):
                v = fx.Int32(xv).bitcast(fx.Float32) * alpha + fx.Int32(yv).bitcast(fx.Float32)
                rocdl.raw_ptr_buffer_store(v.bitcast(fx.Int32).ir_value(), y_rs,
                                           fx.Int32((base + off) * step).ir_value(), fx.Int32(0).ir_value())

        @flyc.jit
        def launch(x: fx.Pointer, y: fx.Pointer, n: fx.Int32, alpha: fx.Float32,
                   stream: fx.Stream = _NULL_STREAM):
            per_block = block * unroll
            axpy_kernel(x, y, n, alpha).launch(grid=((n + (per_block - 1)) // per_block, 1, 1),
                                               block=(block, 1, 1), stream=stream)

        self.launch = flyc.compile[{"llvm_options": llvm_options}](launch) if llvm_options else launch

    def __call__(self, x, y, n: int, alpha: float):
        return self.launch(x, y, n, alpha)


def benchmark(n: int):
    """Host-only: times the kernel on a GPU. A compile never calls it."""
    from tilek.testing.timer import gpu_time

    return gpu_time(Axpy(256, 4), n)
'''

INIT = '''# SPDX-License-Identifier: MIT
"""tilek: small tiled elementwise kernels for FlyDSL."""

from tilek.ops.axpy import Axpy

__all__ = ["Axpy"]
'''

TIMER = '''# SPDX-License-Identifier: MIT
"""GPU timing for the benchmarks (host only)."""

import hip_profiler


def gpu_time(launcher, n):
    return hip_profiler.time(launcher, n)
'''

UPSTREAM_FILES = {"LICENSE": MIT, "python/tilek/__init__.py": INIT, "python/tilek/common/layout.py": LAYOUT,
                  "python/tilek/ops/axpy.py": AXPY, "python/tilek/testing/timer.py": TIMER}

# The farm's own modules for the family, in a folder of their own beside the vendored package (so that the
# spec's interpreter never runs tilek/__init__.py, which imports FlyDSL).
SPEC = '''"""Knob contract of the `axpy` op (the vendored tilek kernel): pure Python, imported at expansion time."""

UNROLLS = (1, 4)
SCHEDULES = ("default", "no-post-misched")


def check_row(knobs: dict) -> None:
    if set(knobs) != {"dtype", "unroll", "schedule"}:
        raise ValueError(f"axpy takes the knobs dtype, unroll and schedule, got {sorted(knobs)}")
    if knobs["dtype"] != "f32":
        raise ValueError(f"knob dtype={knobs['dtype']!r} not supported; accepted: ['f32']")
    if knobs["unroll"] not in UNROLLS:
        raise ValueError(f"knob unroll={knobs['unroll']!r} not supported; accepted: {list(UNROLLS)}")
    if knobs["schedule"] not in SCHEDULES:
        raise ValueError(f"knob schedule={knobs['schedule']!r} not supported; accepted: {list(SCHEDULES)}")
'''
GENERATOR = '''"""The farm's entry point for the `axpy` op: upstream's launcher class, adapted to the contract."""

import flydsl.compiler as flyc
import flydsl.expr as fx

from tilek.ops.axpy import Axpy
from tilek_farm.spec import check_row

BLOCK = 256
TRACE_N = 4096  # trace size only: n is a kernel argument, never part of the object
# LLVM options per schedule knob: they reach the compile as the kernel's own compile hint.
LLVM_OPTIONS = {"default": None, "no-post-misched": {"enable-post-misched": False}}


def trace_pointer():
    """A pointer argument for tracing: its address is never used (nothing is launched), its alignment is
    part of the trace (the kernel may assume it), so it is fixed here."""
    return flyc.from_c_void_p(fx.Float32, 0, assumed_align=16)


def launcher_and_args(knobs: dict):
    check_row(knobs)
    launcher = Axpy(BLOCK, knobs["unroll"], LLVM_OPTIONS[knobs["schedule"]])
    return launcher, (trace_pointer(), trace_pointer(), TRACE_N, 2.0)
'''
OP = """# y = alpha * x + y over n f32 elements. Kernel source: kernels_src/tilek/ (vendored from tilek).
name: axpy
family: tilek
generator: tilek_farm.generator
spec: tilek_farm.spec
symbols: [axpy_kernel_0]
targets: [gfx942]
groups:
  - name: all
    name_format: 'axpy_{dtype}_u{unroll}_{schedule}'
    axes:
      dtype: [f32]
      unroll: [4]
      schedule: [default, no-post-misched]
"""


def make_upstream(where: Path) -> tuple[Path, str]:
    """The tilek repository (origin URL set, as a clone has it) and its one commit."""
    repo = where / "tilek"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "remote", "add", "origin", URL)
    return repo, commit_files(repo, dict(UPSTREAM_FILES), "tilek kernels")


def kernel_sources() -> dict[str, bytes]:
    """The family as a compile's kernels_src/ holds it once vendored (no headers: a compile needs none),
    as farm/worker/isolate.py takes them."""
    files = {"tilek/__init__.py": INIT, "tilek/common/layout.py": LAYOUT, "tilek/ops/axpy.py": AXPY,
             "tilek_farm/spec.py": SPEC, "tilek_farm/generator.py": GENERATOR}
    return {rel: text.encode() for rel, text in files.items()}

"""The RMSNorm objects run on the model against a numpy reference: seeded inputs, launches laid out the way
each kernel's SOURCE.md documents its arguments (offsets read from the object's metadata note), and the
error of every output element.

Forward (`rmsnorm_fwd_0`): y = x * inv_rms * gamma, inv_rms = 1 / sqrt(mean(x^2) + eps); training objects
also store inv_rms. Backward: `rmsnorm_bwd_partial` (grid num_programs) then `rmsnorm_bwd_reduce` (grid
ceil(N / 32)): dx = inv_rms * (gamma*dy - x_hat * mean(x_hat * gamma*dy)), x_hat = x * inv_rms, and
dgamma = sum over rows of dy * x_hat.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass

import numpy as np

from amdgpu_models.core.memory import Memory
from amdgpu_models.core.workgroup import Decoder, Launch, Runner
from farm.emulate.launch import Kernel, NotLaunchable, Program, block, kernel
from farm.emulate.numerics import BYTES, TOLERANCE, Form, decode, encode, errors
from farm.emulate.outcome import CaseOutcome, Fact

SEED = 20261202
REDUCE_COLUMNS = 32  # columns per reduce workgroup (its SOURCE.md: grid ceil(N / 32))


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    eps: float
    scale: float  # x's spread: small values make eps matter
    num_programs: int = 1  # backward only

    def facts(self) -> dict[str, Fact]:
        return asdict(self)


def forward_cases(knobs: dict) -> list[Case]:
    """Baked objects: their own N, two M and two eps. Generic objects: N on the vector path (a multiple of
    8), N on the element path (odd), and N = 1."""
    n = int(knobs.get("n") or 0)
    if n:
        return [Case(2, n, 1e-6, 1.0), Case(1, n, 1e-2, 0.05)]
    return [Case(3, 1024, 1e-6, 1.0), Case(2, 999, 1e-3, 0.05), Case(2, 1, 1e-5, 1.0)]


def backward_cases(knobs: dict) -> list[Case]:
    """Baked: the object's N with rows shared by two programs and rows left to one. Generic: its largest N
    and an odd N a quarter of it (the element path, with a tail; smaller, because the reduce kernel runs
    ceil(N / 32) workgroups of eight waves and the model runs them one by one)."""
    n = int(knobs.get("n") or 0)
    if n:
        return [Case(3, n, 1e-6, 1.0, num_programs=2), Case(1, n, 1e-2, 0.05, num_programs=1)]
    n_max = int(knobs["n_max"])
    return [Case(3, n_max, 1e-6, 1.0, num_programs=2), Case(2, n_max // 4 - 3, 1e-3, 0.05, num_programs=3)]


def _kernarg(memory: Memory, kernel: Kernel, values: list[int | float]) -> int:
    """The kernel's argument block, each value at the offset and size the metadata gives (pointers and i32
    by size; a float where the launch passes one), padded: the kernels load arguments in 16-byte pieces."""
    if len(values) != len(kernel.arguments):
        raise NotLaunchable(f"{kernel.name} takes {len(kernel.arguments)} arguments, the launch has {len(values)}")
    block = bytearray(max(kernel.descriptor.kernarg_bytes, 16) + 64)
    for argument, value in zip(kernel.arguments, values, strict=True):
        form = {8: "<Q", 4: "<f" if isinstance(value, float) else "<i"}.get(argument.size)
        if form is None:
            raise NotLaunchable(f"{kernel.name}: argument {argument.name} has {argument.size} bytes")
        struct.pack_into(form, block, argument.offset, value)
    return memory.allocate(f"{kernel.name} arguments", bytes(block))


def run_forward(program: Program, knobs: dict, case: Case, rng: np.random.Generator, decoder: Decoder) -> CaseOutcome:
    form = Form.of(str(knobs["dtype"]))
    fwd = kernel(program, "rmsnorm_fwd_0")
    x = encode(rng.standard_normal((case.m, case.n)) * case.scale, form.data)
    gamma = encode(rng.standard_normal(case.n), form.gamma)
    memory = Memory()
    at_x, at_gamma = memory.allocate("x", x), memory.allocate("gamma", gamma)
    at_y = memory.allocate("y", bytes(case.m * case.n * BYTES[form.data]))
    at_inv = memory.allocate("inv_rms", bytes(4 * case.m))
    kernarg = _kernarg(memory, fwd, [at_x, at_gamma, at_y, at_inv, case.m, case.n, case.n, case.n, case.eps])
    Runner(program, fwd, decoder).run(Launch(fwd, (case.m, 1, 1), block(fwd), kernarg), memory)

    xs, g = decode(x, form.data).reshape(case.m, case.n), decode(gamma, form.gamma)
    inv_rms = 1.0 / np.sqrt(np.mean(xs * xs, axis=1) + np.float64(np.float32(case.eps)))
    outcome = CaseOutcome(case)
    y = decode(memory.contents(at_y), form.data).reshape(case.m, case.n)
    _score(outcome, "y", y, xs * inv_rms[:, None] * g, form.data)
    if knobs.get("phase") == "train":
        stored = decode(memory.contents(at_inv), "f32")
        _score(outcome, "inv_rms", stored[None, :], inv_rms[None, :], "f32")
    return outcome


def run_backward(program: Program, knobs: dict, case: Case, rng: np.random.Generator, decoder: Decoder,
                 ) -> CaseOutcome:
    form = Form.of(str(knobs["dtype"]))
    partial, reduce = kernel(program, "rmsnorm_bwd_partial"), kernel(program, "rmsnorm_bwd_reduce")
    m, n, p = case.m, case.n, case.num_programs
    x = encode(rng.standard_normal((m, n)) * case.scale, form.data)
    dy = encode(rng.standard_normal((m, n)), form.data)
    gamma = encode(rng.standard_normal(n), form.gamma)
    xs, dys, g = (decode(x, form.data).reshape(m, n), decode(dy, form.data).reshape(m, n),
                  decode(gamma, form.gamma))
    inv_rms = (1.0 / np.sqrt(np.mean(xs * xs, axis=1) + case.eps)).astype(np.float32)  # the forward's output
    memory = Memory()
    at = {name: memory.allocate(name, data) for name, data in
          (("x", x), ("gamma", gamma), ("dy", dy), ("inv_rms", inv_rms))}
    at["dx"] = memory.allocate("dx", bytes(m * n * BYTES[form.data]))
    at["workspace"] = memory.allocate("workspace", bytes(4 * p * n))
    at["dgamma"] = memory.allocate("dgamma", bytes(n * BYTES[form.gamma]))
    args = [at["x"], at["gamma"], at["dy"], at["inv_rms"], at["dx"], at["workspace"], m, n, p, n, n, n]
    Runner(program, partial, decoder).run(
        Launch(partial, (p, 1, 1), block(partial), _kernarg(memory, partial, args)), memory)
    grid = (-(-n // REDUCE_COLUMNS), 1, 1)
    args = [at["workspace"], at["dgamma"], n, p]
    Runner(program, reduce, decoder).run(Launch(reduce, grid, block(reduce), _kernarg(memory, reduce, args)), memory)

    r = inv_rms.astype(np.float64)[:, None]
    x_hat, wdy = xs * r, g * dys
    outcome = CaseOutcome(case)
    dx = decode(memory.contents(at["dx"]), form.data).reshape(m, n)
    _score(outcome, "dx", dx, r * (wdy - x_hat * np.mean(x_hat * wdy, axis=1, keepdims=True)), form.data)
    dgamma = decode(memory.contents(at["dgamma"]), form.gamma)
    _score(outcome, "dgamma", dgamma[None, :], np.sum(dys * x_hat, axis=0)[None, :], form.gamma)
    return outcome


def _score(outcome: CaseOutcome, name: str, out: np.ndarray, ref: np.ndarray, dtype: str) -> None:
    outcome.add(name, "relative", float(np.max(errors(out, ref))), TOLERANCE[dtype], dtype)


def check(program: Program, op: str, knobs: dict, decoder: Decoder) -> list[CaseOutcome]:
    """Every case of one object, inputs seeded by the case (the same inputs on every run). `decoder`: the
    ISA's (amdgpu_models.isa.gfx11.decode with LLVM's llvm-mc bound)."""
    if op == "rmsnorm":
        cases, run = forward_cases(knobs), run_forward
    elif op == "rmsnorm_bwd":
        cases, run = backward_cases(knobs), run_backward
    else:
        raise NotLaunchable(f"op {op!r}: only the RMSNorm families are modelled")
    return [run(program, knobs, case, np.random.default_rng([SEED, i]), decoder) for i, case in enumerate(cases)]

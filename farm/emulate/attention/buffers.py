"""Buffers of an attention launch: tensors in a strided layout, surrounded by guard bytes, their padding and
unwritten elements holding the guard pattern (a NaN in every element type, so a kernel that reads padding
computes NaN, and an element it should write but does not stays NaN); the kernel arguments laid out as the
family's SOURCE.md documents them, checked against the object's metadata note; and what a run must leave
alone (guards, inputs, padding), as measures that fail the case.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from amdgpu_models.core.memory import Memory, guard_pattern
from farm.emulate.launch import Kernel, NotLaunchable
from farm.emulate.outcome import CaseOutcome

# Bytes on each side of every buffer: a multiple of 16 (buffers stay 16-byte aligned), and more than the farthest
# past its last row a kernel here has been seen to read (the decode V staging: 7 rows of 2 heads x 256 elements).
GUARD = 16384
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4}


@dataclass(frozen=True)
class Arg:
    name: str
    offset: int
    size: int
    form: str  # "ptr", "i64", "i32", "f32"


def layout(*spec: tuple[str, int, str]) -> tuple[Arg, ...]:
    """Arguments from (name, offset, form) in order; the size follows from the form."""
    return tuple(Arg(name, offset, 4 if form in ("i32", "f32") else 8, form) for name, offset, form in spec)


def kernarg(memory: Memory, of: Kernel, args: tuple[Arg, ...], values: dict[str, int | float]) -> int:
    """The argument block: each documented argument at its offset, after checking that the metadata note
    lists the same offsets and sizes in the same order (an object that disagrees with its SOURCE.md is not
    launched on a guess)."""
    found = [(a.offset, a.size) for a in of.arguments]
    documented = [(a.offset, a.size) for a in args]
    if found != documented:
        raise NotLaunchable(f"{of.name}: the metadata's arguments (offset, size) {found} are not the documented "
                            f"{documented}")
    raw = bytearray(max(of.descriptor.kernarg_bytes, args[-1].offset + args[-1].size))
    raw += bytes(-len(raw) % 16 + 64)  # the kernels load arguments in 16-byte pieces
    for arg in args:
        form = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}[arg.form]
        struct.pack_into(form, raw, arg.offset, values[arg.name])
    return memory.allocate(f"{of.name} arguments", bytes(raw), guard=GUARD)


@dataclass(frozen=True)
class Strided:
    """A [B, H, S, D] tensor's place in its buffer: element strides (the head-dim stride is 1)."""

    shape: tuple[int, int, int, int]
    batch: int
    head: int
    seq: int
    elements: int  # the buffer's size in elements

    @classmethod
    def of(cls, shape: tuple[int, int, int, int], order: str, pad: int = 0) -> Strided:
        """`order` "bshd" (rows of all heads per position, `pad` elements after each position) or "bhsd"
        (head-major, `pad` elements after each row)."""
        b, h, s, d = shape
        if order == "bshd":
            seq, head = h * d + pad, d
            batch = s * seq
        elif order == "bhsd":
            seq = d + pad
            head = s * seq
            batch = h * head
        else:
            raise ValueError(f"layout {order!r}")
        return cls(shape, batch, head, seq, max(b * batch, 1))

    def view(self, flat: np.ndarray) -> np.ndarray:
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(
            flat, shape=self.shape, strides=(self.batch * item, self.head * item, self.seq * item, item),
            writeable=True)

    def place(self, values: np.ndarray, dtype: str) -> np.ndarray:
        """The buffer's bytes: `values` (encoded elements) in place, the guard pattern everywhere else."""
        flat = guard_pattern(self.elements * ELEMENT_BYTES[dtype]).view(values.dtype)
        self.view(flat)[...] = values
        return flat

    def read(self, raw: np.ndarray, dtype_of: np.dtype) -> np.ndarray:
        return np.array(self.view(raw.view(dtype_of)))

    def padding(self) -> np.ndarray:
        """Per element of the buffer: not part of the tensor."""
        used = np.zeros(self.elements, dtype=bool)
        self.view(used)[...] = True
        return ~used


@dataclass
class Buffers:
    """A case's buffers: their addresses, and the bytes each input held when it was placed."""

    memory: Memory = field(default_factory=Memory)
    address: dict[str, int] = field(default_factory=dict)
    inputs: dict[str, bytes] = field(default_factory=dict)

    def add(self, name: str, data: np.ndarray, is_input: bool) -> int:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        self.address[name] = self.memory.allocate(name, raw, guard=GUARD)
        if is_input:
            self.inputs[name] = raw.tobytes()
        return self.address[name]

    def contents(self, name: str) -> np.ndarray:
        return self.memory.contents(self.address[name])

    def check_untouched(self, outcome: CaseOutcome) -> None:
        """Fails the case for each buffer whose guard bytes changed, and each input the run wrote into."""
        for name in self.memory.damaged_guards():
            outcome.add(f"{name} guard", "guard bytes unchanged", float("inf"), 0.0)
        for name, before in self.inputs.items():
            if self.contents(name).tobytes() != before:
                outcome.add(name, "input unchanged", float("inf"), 0.0)


def check_padding(outcome: CaseOutcome, name: str, raw: np.ndarray, where: Strided, dtype: str) -> None:
    """Fails the case when an output's padding (elements between its rows) no longer holds the pattern."""
    size = ELEMENT_BYTES[dtype]
    expected = guard_pattern(where.elements * size).reshape(-1, size)
    changed = np.any(raw.reshape(-1, size) != expected, axis=1) & where.padding()
    if np.any(changed):
        outcome.add(name, "padding unchanged", float("inf"), 0.0)

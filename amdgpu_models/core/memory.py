"""Global memory as separate buffers with real bounds, and a workgroup's LDS.

Every buffer the launch passes (inputs, outputs, the kernel arguments) is its own allocation at its own
address, with unmapped gaps between them: an access that leaves its allocation is a BoundsError naming the
address, never a read of a neighbour. The one exception is what a buffer resource descriptor itself says
(RDNA3 ISA guide, "Buffer Instructions": a raw buffer's dword at or past NUM_RECORDS reads 0 and its write
is dropped), which `buffer_*` instructions apply before memory is touched.

A buffer can be allocated with guard bytes on both sides (`allocate(..., guard=n)`): `n` bytes of a known
pattern (GUARD_WORD repeated: a NaN as f16, bf16 and f32, so a kernel that reads them computes NaN) that
belong to the allocation, so an access to them is not a BoundsError, but that no kernel should write.
`damaged_guards()` names every buffer whose guard bytes changed: a write just outside a buffer is found
after the run, as on hardware it would silently land in a neighbour. Past the guards the bounds hold as
before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FIRST_ADDRESS = 0x1_0000_0000  # above 4 GiB, so a 32-bit offset mistaken for an address misses everything
GAP = 0x1_0000  # unmapped bytes after each allocation
GUARD_WORD = b"\xff\x7f\xff\x7f"  # 0x7FFF7FFF: NaN as f32, and each half NaN as f16 and bf16


def guard_pattern(size: int) -> np.ndarray:
    """`size` bytes of the guard pattern (uint8)."""
    return np.frombuffer(GUARD_WORD * (size // 4 + 1), dtype=np.uint8)[:size].copy()


# gather/scatter: a value's byte offsets, and its little-endian type, by size in bytes
_BYTE_STEPS = {size: np.arange(size, dtype=np.int64) for size in (1, 2, 4)}
_LITTLE = {1: np.uint8, 2: np.dtype("<u2"), 4: np.dtype("<u4")}


class BoundsError(RuntimeError):
    """A load or store outside every allocation (or outside the workgroup's LDS)."""


@dataclass
class Allocation:
    name: str
    start: int  # address of region[0]
    region: np.ndarray  # uint8: `guard` bytes, the buffer, `guard` bytes
    guard: int = 0

    @property
    def base(self) -> int:
        """The buffer's first byte (after its leading guard)."""
        return self.start + self.guard

    @property
    def data(self) -> np.ndarray:
        """The buffer's bytes (a view, without the guards)."""
        return self.region[self.guard:len(self.region) - self.guard]

    def guards_intact(self) -> bool:
        if not self.guard:
            return True
        expected = guard_pattern(self.guard)
        return bool(np.array_equal(self.region[:self.guard], expected)
                    and np.array_equal(self.region[len(self.region) - self.guard:], expected))


@dataclass
class Memory:
    allocations: list[Allocation] = field(default_factory=list)
    next_address: int = FIRST_ADDRESS

    def allocate(self, name: str, data: bytes | np.ndarray, guard: int = 0) -> int:
        """Places a copy of `data` at a fresh address, with `guard` bytes of the guard pattern on each side;
        returns the address of its first byte (`guard` a multiple of 16 keeps it 16-byte aligned)."""
        raw = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, bytes) else \
            np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if guard < 0:
            raise ValueError(f"a guard of {guard} bytes")
        region = np.concatenate([guard_pattern(guard), raw, guard_pattern(guard)])
        start = self.next_address
        self.allocations.append(Allocation(name, start, region, guard))
        self.next_address = (start + len(region) + GAP + 0xFFFF) & ~0xFFFF
        return start + guard

    def damaged_guards(self) -> list[str]:
        """The names of the buffers whose guard bytes are no longer the pattern, in allocation order."""
        return [a.name for a in self.allocations if not a.guards_intact()]

    def contents(self, base: int) -> np.ndarray:
        """The bytes of the allocation at `base` (a view: what the kernel wrote)."""
        for allocation in self.allocations:
            if allocation.base == base:
                return allocation.data
        raise KeyError(f"no allocation at {base:#x}")

    def _find(self, address: int, size: int, what: str) -> tuple[Allocation, int]:
        """The allocation holding `size` bytes at `address` (guards included) and the offset in its region."""
        for allocation in self.allocations:
            offset = address - allocation.start
            if 0 <= offset and offset + size <= len(allocation.region):
                return allocation, offset
        raise BoundsError(f"{what} of {size} bytes at {address:#x} is outside every buffer")

    def read(self, address: int, size: int, what: str = "a load") -> bytes:
        allocation, offset = self._find(address, size, what)
        return allocation.region[offset:offset + size].tobytes()

    def gather(self, addresses: np.ndarray, size: int, active: np.ndarray, what: str) -> np.ndarray:
        """Per active lane, `size` (1, 2 or 4) bytes at its address as one little-endian value (0 elsewhere)."""
        out = np.zeros(len(addresses), dtype=np.uint32)
        lanes = np.flatnonzero(active)
        if not len(lanes):
            return out
        allocation, _ = self._span(addresses[lanes], size, what)
        offsets = addresses[lanes].astype(np.int64) - allocation.start
        # Every lane's `size` bytes in one indexing, read as little-endian values of that size.
        raw = allocation.region[offsets[:, None] + _BYTE_STEPS[size]]
        out[lanes] = raw.view(_LITTLE[size]).reshape(-1)
        return out

    def scatter(self, addresses: np.ndarray, values: np.ndarray, size: int, active: np.ndarray, what: str,
                ) -> None:
        """Stores `size` bytes of each active lane's value; lanes storing to the same bytes: the highest lane
        wins (numpy's fancy assignment keeps the last)."""
        lanes = np.flatnonzero(active)
        if not len(lanes):
            return
        allocation, _ = self._span(addresses[lanes], size, what)
        offsets = addresses[lanes].astype(np.int64) - allocation.start
        # Each lane's low `size` bytes, little-endian, in one assignment ordered byte 0 of every lane, then
        # byte 1, ...: of equal indices the last is kept, as when each byte was stored in turn.
        raw = values[lanes].astype("<u4").view(np.uint8).reshape(-1, 4)[:, :size]
        allocation.region[(offsets[None, :] + _BYTE_STEPS[size][:, None]).reshape(-1)] = raw.T.reshape(-1)

    def _span(self, addresses: np.ndarray, size: int, what: str) -> tuple[Allocation, int]:
        """The one allocation holding every address (each lane checked on its own when they differ)."""
        low, high = int(addresses.min()), int(addresses.max())
        try:
            return self._find(low, high - low + size, what)
        except BoundsError:
            for address in addresses:  # name the first lane that is outside, or the straddle
                self._find(int(address), size, what)
            raise BoundsError(f"{what} spans two buffers ({low:#x}..{high + size:#x})") from None


@dataclass
class Lds:
    """A workgroup's local data share: the descriptor's group segment size, nothing more."""

    data: np.ndarray

    @classmethod
    def of_size(cls, size: int) -> Lds:
        return cls(np.zeros(size, dtype=np.uint8))

    def _check(self, addresses: np.ndarray, size: int, active: np.ndarray) -> None:
        bad = active & ((addresses < 0) | (addresses + size > len(self.data)))
        if bad.any():
            lane = int(np.flatnonzero(bad)[0])
            raise BoundsError(f"LDS access of {size} bytes at {int(addresses[lane]):#x} (lane {lane}) is "
                              f"outside the {len(self.data)} bytes the kernel declares")

    def load(self, addresses: np.ndarray, active: np.ndarray) -> np.ndarray:
        """One dword per active lane."""
        words = self.data.view(np.uint32) if len(self.data) % 4 == 0 else None
        if words is not None and active.all():  # the common case, in fewer array operations
            if addresses.min() >= 0 and addresses.max() + 4 <= len(self.data) and not (addresses % 4).any():
                return words[addresses // 4]
        self._check(addresses, 4, active)
        if words is not None and not (addresses[active] % 4).any():
            safe = np.where(active, addresses, 0) // 4
            return np.where(active, words[safe], 0).astype(np.uint32)
        out = np.zeros(len(addresses), dtype=np.uint32)
        for lane in np.flatnonzero(active):
            at = int(addresses[lane])
            out[lane] = int.from_bytes(self.data[at:at + 4].tobytes(), "little")
        return out

    def store(self, addresses: np.ndarray, values: np.ndarray, active: np.ndarray, size: int = 4) -> None:
        """One dword (or, `size` 2, the low 16 bits) per active lane; lanes storing to the same bytes: the
        highest lane wins."""
        self._check(addresses, size, active)
        lanes = np.flatnonzero(active)
        if size == 4 and len(self.data) % 4 == 0 and not (addresses[lanes] % 4).any():
            self.data.view(np.uint32)[addresses[lanes] // 4] = values[lanes]
            return
        for lane in lanes:
            at = int(addresses[lane])
            raw = (int(values[lane]) & (1 << 8 * size) - 1).to_bytes(size, "little")
            self.data[at:at + size] = np.frombuffer(raw, dtype=np.uint8)

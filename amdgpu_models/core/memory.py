"""Global memory as separate buffers with real bounds, and a workgroup's LDS.

Every buffer the launch passes (inputs, outputs, the kernel arguments) is its own allocation at its own
address, with unmapped gaps between them: an access that leaves its allocation is a BoundsError naming the
address, never a read of a neighbour. The one exception is what a buffer resource descriptor itself says
(RDNA3 ISA guide, "Buffer Instructions": a raw buffer's dword at or past NUM_RECORDS reads 0 and its write
is dropped), which `buffer_*` instructions apply before memory is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FIRST_ADDRESS = 0x1_0000_0000  # above 4 GiB, so a 32-bit offset mistaken for an address misses everything
GAP = 0x1_0000  # unmapped bytes after each allocation


class BoundsError(RuntimeError):
    """A load or store outside every allocation (or outside the workgroup's LDS)."""


@dataclass
class Allocation:
    name: str
    base: int
    data: np.ndarray  # uint8


@dataclass
class Memory:
    allocations: list[Allocation] = field(default_factory=list)
    next_address: int = FIRST_ADDRESS

    def allocate(self, name: str, data: bytes | np.ndarray) -> int:
        """Places a copy of `data` at a fresh address; returns the address."""
        raw = np.frombuffer(bytes(data), dtype=np.uint8).copy() if isinstance(data, bytes) else \
            np.ascontiguousarray(data).view(np.uint8).reshape(-1).copy()
        base = self.next_address
        self.allocations.append(Allocation(name, base, raw))
        self.next_address = (base + len(raw) + GAP + 0xFFFF) & ~0xFFFF
        return base

    def contents(self, base: int) -> np.ndarray:
        """The bytes of the allocation at `base` (a view: what the kernel wrote)."""
        for allocation in self.allocations:
            if allocation.base == base:
                return allocation.data
        raise KeyError(f"no allocation at {base:#x}")

    def _find(self, address: int, size: int, what: str) -> tuple[Allocation, int]:
        for allocation in self.allocations:
            offset = address - allocation.base
            if 0 <= offset and offset + size <= len(allocation.data):
                return allocation, offset
        raise BoundsError(f"{what} of {size} bytes at {address:#x} is outside every buffer")

    def read(self, address: int, size: int, what: str = "a load") -> bytes:
        allocation, offset = self._find(address, size, what)
        return allocation.data[offset:offset + size].tobytes()

    def gather(self, addresses: np.ndarray, size: int, active: np.ndarray, what: str) -> np.ndarray:
        """Per active lane, `size` (1, 2 or 4) bytes at its address as one little-endian value (0 elsewhere)."""
        out = np.zeros(len(addresses), dtype=np.uint32)
        lanes = np.flatnonzero(active)
        if not len(lanes):
            return out
        allocation, start = self._span(addresses[lanes], size, what)
        offsets = addresses[lanes].astype(np.int64) - allocation.base
        for k in range(size):  # byte k of every lane at once
            out[lanes] |= allocation.data[offsets + k].astype(np.uint32) << np.uint32(8 * k)
        return out

    def scatter(self, addresses: np.ndarray, values: np.ndarray, size: int, active: np.ndarray, what: str,
                ) -> None:
        """Stores `size` bytes of each active lane's value; lanes storing to the same bytes: the highest lane
        wins (numpy's fancy assignment keeps the last)."""
        lanes = np.flatnonzero(active)
        if not len(lanes):
            return
        allocation, _ = self._span(addresses[lanes], size, what)
        offsets = addresses[lanes].astype(np.int64) - allocation.base
        for k in range(size):
            allocation.data[offsets + k] = (values[lanes] >> np.uint32(8 * k) & 0xFF).astype(np.uint8)

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
        if np.any(bad):
            lane = int(np.flatnonzero(bad)[0])
            raise BoundsError(f"LDS access of {size} bytes at {int(addresses[lane]):#x} (lane {lane}) is "
                              f"outside the {len(self.data)} bytes the kernel declares")

    def load(self, addresses: np.ndarray, active: np.ndarray) -> np.ndarray:
        """One dword per active lane."""
        self._check(addresses, 4, active)
        words = self.data.view(np.uint32) if len(self.data) % 4 == 0 else None
        if words is not None and not np.any(addresses[active] % 4):
            safe = np.where(active, addresses, 0) // 4
            return np.where(active, words[safe], 0).astype(np.uint32)
        out = np.zeros(len(addresses), dtype=np.uint32)
        for lane in np.flatnonzero(active):
            at = int(addresses[lane])
            out[lane] = int.from_bytes(self.data[at:at + 4].tobytes(), "little")
        return out

    def store(self, addresses: np.ndarray, values: np.ndarray, active: np.ndarray) -> None:
        """One dword per active lane; lanes storing to the same dword: the highest lane wins."""
        self._check(addresses, 4, active)
        lanes = np.flatnonzero(active)
        if len(self.data) % 4 == 0 and not np.any(addresses[lanes] % 4):
            self.data.view(np.uint32)[addresses[lanes] // 4] = values[lanes]
            return
        for lane in lanes:
            at = int(addresses[lane])
            self.data[at:at + 4] = np.frombuffer(int(values[lane]).to_bytes(4, "little"), dtype=np.uint8)

"""The kernel metadata (the msgpack note): which kernels exist, each kernel's fields (ABI and resource
limits before the register counts they cause), the other top-level keys, and the note entries."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from farm.assure.elfdiff.difference import ABSENT, Difference, only, same, show
from farm.assure.elfdiff.parse import Metadata, Parsed
from farm.assure.elfdiff.views.base import View

# Per-kernel metadata fields, ABI and resource limits before the register counts they cause.
KERNEL_FIELD_ORDER = (
    ".symbol", ".wavefront_size", ".kernarg_segment_size", ".kernarg_segment_align", ".args",
    ".group_segment_fixed_size", ".private_segment_fixed_size", ".uses_dynamic_stack",
    ".vgpr_spill_count", ".sgpr_spill_count", ".vgpr_count", ".agpr_count", ".sgpr_count",
)
# Top-level keys that other views compare (Target: target and version; Kernels: the kernels).
OWN_VIEW_KEYS = {"amdhsa.target", "amdhsa.version", "amdhsa.kernels"}


def _ordered_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    keys = set(a) | set(b)
    first = [k for k in KERNEL_FIELD_ORDER if k in keys]
    return first + sorted(keys - set(first), key=str)


def _is_records(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value) and bool(value)


def value_diffs(path: str, a: Any, b: Any) -> Iterator[tuple[str, Any, Any]]:
    """(path, a, b) for every leaf that differs; lists of records (.args) are compared entry by entry."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in _ordered_keys(a, b):
            yield from value_diffs(f"{path}{key}", a.get(key, ABSENT), b.get(key, ABSENT))
    elif _is_records(a) and _is_records(b):
        if len(a) != len(b):
            yield f"{path} count", len(a), len(b)
        for i in range(max(len(a), len(b))):
            yield from value_diffs(f"{path}[{i}]", a[i] if i < len(a) else ABSENT, b[i] if i < len(b) else ABSENT)
    elif not same(a, b):
        yield path, a, b


def _kernels_by_name(metadata: Metadata) -> dict[str, Metadata]:
    found: dict[str, Metadata] = {}
    for i, kernel in enumerate(metadata.get("amdhsa.kernels", [])):
        name = str(kernel.get(".name", f"[{i}]")) if isinstance(kernel, dict) else f"[{i}]"
        found[name if name not in found else f"{name}#{i}"] = kernel if isinstance(kernel, dict) else {}
    return found


class Kernels(View):
    """amdhsa.kernels: kernels present on one side only, their order, then each common kernel's fields."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        if a.metadata is None or b.metadata is None:
            return
        ka, kb = _kernels_by_name(a.metadata), _kernels_by_name(b.metadata)
        for name in only(ka, kb):
            yield Difference("kernel", name, name, ABSENT, f"kernel {name} only in A")
        for name in only(kb, ka):
            yield Difference("kernel", name, ABSENT, name, f"kernel {name} only in B")
        common = [n for n in ka if n in kb]
        if common != [n for n in kb if n in ka]:
            yield Difference("metadata", "amdhsa.kernels order", common, [n for n in kb if n in ka],
                             "amdhsa.kernels listed in a different order")
        for name in common:
            for path, va, vb in value_diffs("", ka[name], kb[name]):
                yield Difference("metadata", f"{name} {path}", va, vb, f"{name} {path} {show(va)} vs {show(vb)}")


class OtherMetadata(View):
    """Top-level metadata keys no other view compares (e.g. amdhsa.printf), and the note sections' entries."""

    def differences(self, a: Parsed, b: Parsed) -> Iterator[Difference]:
        if a.metadata is not None and b.metadata is not None:
            rest_a = {k: v for k, v in a.metadata.items() if k not in OWN_VIEW_KEYS}
            rest_b = {k: v for k, v in b.metadata.items() if k not in OWN_VIEW_KEYS}
            for path, va, vb in value_diffs("", rest_a, rest_b):
                yield Difference("metadata", path, va, vb, f"{path} {show(va)} vs {show(vb)}")
        for name in [n for n in a.sections if n in b.sections]:
            # (name, type, descriptor size) of each entry: the descriptors are compared by the views that own them
            na, nb = ([(n.name, n.type, n.descsz) for n in p.sections[name].notes] for p in (a, b))
            if na != nb:
                yield Difference("metadata", f"{name} notes", na, nb,
                                 f"note entries in {name} (name, type, size): {show(na)} vs {show(nb)}")

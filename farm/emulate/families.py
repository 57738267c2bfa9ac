"""What `farm emulate` can run: a family's check by op, an ISA model by target. An object runs only when its
op has a check here and its target an ISA; any other object is NOT EMULATED, with the reason `refusal` gives.

Adding a family is one line in CHECKS (its check: `check(program, op, knobs, decoder) -> list[CaseOutcome]`,
farm/emulate/outcome.py); adding an ISA is one line in ISAS (a module of amdgpu_models/isa/ with
`decode(code, address, llvm_mc)`). Both are named by text: the command's driver reads only these names and
ships them with each task, which imports what it runs (farm/emulate/task.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# op -> the check of its family
CHECKS: dict[str, str] = {
    "rmsnorm": "farm.emulate.rmsnorm_check:check",
    "rmsnorm_bwd": "farm.emulate.rmsnorm_check:check",
    "sdpa_rdna": "farm.emulate.attention.forward_check:check",
    "sdpa_rdna4": "farm.emulate.attention.forward_check:check",
    "sdpa_rdna_decode": "farm.emulate.attention.decode_check:check",
    "sdpa_cdna": "farm.emulate.attention.forward_check:check",
    "sdpa_cdna_dualwave": "farm.emulate.attention.forward_check:check",
    "sdpa_cdna_decode": "farm.emulate.attention.decode_check:check",
}

# target -> the module of amdgpu_models that decodes its objects (its `decode`)
ISAS: dict[str, str] = {
    "gfx11-generic": "amdgpu_models.isa.gfx11",
    "gfx12-generic": "amdgpu_models.isa.gfx12",
    "gfx90a": "amdgpu_models.isa.gfx90a",
    "gfx942": "amdgpu_models.isa.gfx942",
    "gfx950": "amdgpu_models.isa.gfx950",
}


def refusal(op: str, target: str) -> str | None:
    """Why objects of (op, target) cannot be emulated, or None when they can."""
    if op not in CHECKS:
        return f"no check for the {op} family (farm/emulate/families.py CHECKS: {', '.join(sorted(CHECKS))})"
    if target not in ISAS:
        return f"no model of {target} (farm/emulate/families.py ISAS: {', '.join(sorted(ISAS))})"
    return None


def runnable(op: str, target: str) -> bool:
    return refusal(op, target) is None


def named(reference: str) -> Callable[..., Any]:
    """The function a "module:attribute" reference of CHECKS names, or an ISAS module's `decode`."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name or "decode")


def check_of(op: str) -> Callable[..., Any]:
    return named(CHECKS[op])


def decoder_of(target: str) -> Callable[..., Any]:
    """The ISA's `decode(code, address, llvm_mc, ...)`."""
    return named(ISAS[target])

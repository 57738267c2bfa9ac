"""A built object with corrupted code, for the tests that show a family's check cannot pass broken code: every
4-byte instance of one VOP1 instruction gets another opcode, and the check must stop or report it outside."""

from __future__ import annotations

import struct
from collections.abc import Callable

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.core.memory import BoundsError
from farm.emulate.launch import NotLaunchable, load

VOP1_OPCODE = 0xFF << 9  # the VOP1 opcode field, bits 9-16 (GFX9 and RDNA alike)
V_MOV_B32 = 1  # its VOP1 opcode on both


def vop1_as(data: bytes, decode: Callable[[bytes, int], list[Instruction]], name: str,
            opcode: int = V_MOV_B32) -> bytes:
    """`data` with the opcode of every 4-byte `name` (as `decode(text, address)` finds them) set to `opcode`;
    the object must have at least one."""
    program = load(data)
    found = [i for i in decode(program.text, program.text_address) if i.name == name and i.size == 4]
    assert found, f"no 4-byte {name} in the object"
    out = bytearray(data)
    text_offset = data.index(program.text)  # where .text's bytes sit in the file
    for inst in found:
        at = text_offset + inst.address - program.text_address
        word = struct.unpack_from("<I", out, at)[0]
        struct.pack_into("<I", out, at, (word & ~VOP1_OPCODE) | opcode << 9)
    return bytes(out)


def assert_stopped_or_outside(run: Callable[[], list]) -> None:
    """`run()` (a family's check) either stops (as good as outside) or reports no case within."""
    try:
        outcomes = run()
    except (BoundsError, NotLaunchable) as exc:
        assert str(exc)
        return
    assert not any(o.within for o in outcomes)

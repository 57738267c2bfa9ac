"""The farm's side of a launch: a code object's ELF read (by farm/elf) into the plain values
`amdgpu_models.core.kernel` describes a kernel with (its docstring lists them: the code, the kernel descriptor
and the metadata note), all from the object itself, never assumed about the kernel."""

from __future__ import annotations

import struct
from typing import Any

from amdgpu_models.core.kernel import DESCRIPTOR_BYTES, Argument, Descriptor, Kernel, NotLaunchable, Program
from farm.elf import image
from farm.elf.code_object import NotACodeObject, read_code_object

SHF_ALLOC = 0x2  # a section that is part of the loaded image


def load(data: bytes) -> Program:
    """The program of a code object (raises NotLaunchable, naming what is missing or unreadable)."""
    try:
        return _load(data)
    except (NotACodeObject, image.Unreadable, struct.error) as exc:  # a damaged object is data, never a crash
        raise NotLaunchable(f"not a readable code object: {exc}") from None


def _load(data: bytes) -> Program:
    info = read_code_object(data)
    elf = image.read(data)
    text = elf.section(".text")
    if text is None:
        raise NotLaunchable("the object has no .text section")
    symbols = _symbols(elf)
    kernels = {}
    for meta in info.kernels:
        kernel = _kernel(elf, meta, symbols)
        kernels[kernel.name] = kernel
    if not kernels:
        raise NotLaunchable("the object's metadata lists no kernel")
    return Program(info.amdhsa_target, text.data, text.addr, kernels)


def _symbols(elf: image.Image) -> dict[str, int]:
    """Names to addresses, from .symtab (or .dynsym when the object has no .symtab)."""
    table = ".symtab" if elf.section(".symtab") else ".dynsym"
    symbols = [symbol for symbol in elf.symbols if symbol.table == table]
    if not symbols:
        raise NotLaunchable("the object has no symbol table")
    return {symbol.name: symbol.value for symbol in symbols if symbol.name}


def _kernel(elf: image.Image, meta: dict[str, Any], symbols: dict[str, int]) -> Kernel:
    """One kernel from its metadata entry (`meta`), its descriptor found through the symbol table."""
    name = str(meta.get(".name", ""))
    kd_name = str(meta.get(".symbol", f"{name}.kd"))
    if kd_name not in symbols:
        raise NotLaunchable(f"kernel {name!r}: no symbol {kd_name!r} for its descriptor")
    kd_address = symbols[kd_name]
    descriptor = Descriptor.parse(_bytes_at(elf, kd_address, DESCRIPTOR_BYTES))
    arguments = tuple(Argument(str(a.get(".name", f"arg{i}")), int(a[".offset"]), int(a[".size"]),
                               str(a.get(".value_kind", ""))) for i, a in enumerate(meta.get(".args", [])))
    required = meta.get(".reqd_workgroup_size")
    size = (int(required[0]), int(required[1]), int(required[2])) if required else None
    return Kernel(name, kd_address + descriptor.entry_offset, descriptor, arguments, size,
                  int(meta.get(".wavefront_size", 64)))


def _bytes_at(elf: image.Image, address: int, length: int) -> bytes:
    """`length` bytes at virtual `address`, from the section that holds them."""
    for section in elf.sections:
        loaded = section.flags & SHF_ALLOC and section.type != "SHT_NOBITS"
        if loaded and section.addr <= address and address + length <= section.addr + section.size:
            return section.data[address - section.addr:address - section.addr + length]
    raise NotLaunchable(f"no section holds the {length} bytes at {address:#x}")


def kernel(program: Program, name: str) -> Kernel:
    """The object's kernel `name`; NotLaunchable naming the kernels it has when it has no such kernel."""
    if name not in program.kernels:
        raise NotLaunchable(f"the object has no kernel {name!r} (it has {', '.join(sorted(program.kernels))})")
    return program.kernels[name]


def block(of: Kernel) -> tuple[int, int, int]:
    """The kernel's workgroup size, which the model must know (.reqd_workgroup_size)."""
    if of.workgroup_size is None:
        raise NotLaunchable(f"{of.name} has no .reqd_workgroup_size; the model needs the block size")
    return of.workgroup_size


__all__ = ["Argument", "Descriptor", "Kernel", "NotLaunchable", "Program", "block", "kernel", "load"]

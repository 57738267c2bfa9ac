"""A built object of the instance table run through its family's check on its target's model, for the tests
that compare an object with a mutated or corrupted one (the attention, CDNA attention and CDNA decode tests)."""

from __future__ import annotations

import json
from functools import partial

from conftest import REPO
from gfx11_asm import assembler

from farm.emulate import families
from farm.emulate.launch import load


def row_knobs(op: str, target: str, name: str) -> dict:
    """The knobs of the row `op/target/name` of this checkout's instance table."""
    for line in (REPO / "instances" / f"{op}.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["name"] == name and row["target"] == target:
            return row["knobs"]
    raise AssertionError(f"no row {op}/{target}/{name}")


def run_object(data: bytes, op: str, target: str, name: str) -> list:
    """The outcomes of `op`'s check on the object bytes `data`, built for the row `op/target/name`."""
    return families.check_of(op)(load(data), op, row_knobs(op, target, name),
                                 partial(families.decoder_of(target), llvm_mc=assembler()))

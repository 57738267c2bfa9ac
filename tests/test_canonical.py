"""canonical_json's fast path gives exactly json's indented, sorted, ASCII bytes, for any JSON data."""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from enum import IntEnum
from pathlib import Path

import pytest
from conftest import REPO

from farm.core.canonical import canonical_json


def _json(data: object) -> str:
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


def _random(rng: random.Random, depth: int) -> object:
    leaves = [lambda: rng.choice(["", "a", "é", "\u2028", '"\\/\n\t', "\x00", "🚀", "k" * rng.randrange(40)]),
              lambda: rng.randrange(-10**20, 10**20), lambda: rng.choice([0, -1, 1, True, False, None]),
              lambda: rng.choice([0.0, -0.0, 1.5, 1e16, 1e-7, 3.141592653589793, float("nan"), float("inf"),
                                  -float("inf"), rng.random() * 10 ** rng.randrange(-30, 30)])]
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice(leaves)()
    if rng.random() < 0.5:
        return [_random(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "b", "é", "", "z", "_", "A", "aa", str(rng.randrange(9))]): _random(rng, depth - 1)
            for _ in range(rng.randrange(5))}


def test_random_data_formats_exactly_as_json() -> None:
    rng = random.Random(20261203)
    for _ in range(3000):
        data = _random(rng, 5)
        assert canonical_json(data) == _json(data), data


class _Knob(IntEnum):
    ONE = 1


@pytest.mark.parametrize("data", [
    {1: "int key"}, {"a": OrderedDict(b=1)}, {"a": (1, [2, ()])}, [_Knob.ONE], {"n": {True: None}},
])
def test_what_the_fast_path_does_not_know_takes_json_s_own_path(data: object) -> None:
    assert canonical_json(data) == _json(data)


def test_data_json_cannot_encode_still_fails_as_json_does() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        canonical_json(loop)
    with pytest.raises(TypeError):
        canonical_json({"a": {1, 2}})


def test_instance_table_rows_format_exactly_as_json() -> None:
    for path in sorted((REPO / "instances").glob("*.jsonl"))[:3]:
        for line in Path(path).read_text().splitlines()[:50]:
            row = json.loads(line)
            assert canonical_json(row) == _json(row)

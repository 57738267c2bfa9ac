"""The CI sample of `farm emulate` (`farm emulate --ci-sample`, .ci/run): one object for every family x target x
dtype form that the models can run (farm/emulate/families.py), so it grows as families and ISAs are added.

Within a form the object is chosen to show what the form's siblings have not shown yet: the one whose knob
values (and group: generic or baked tiers, ...) add the most not yet in the sample of its family and target,
the first by key on a tie. The same table gives the same sample, whatever the order of its rows.
"""

from __future__ import annotations

from farm.emulate.families import runnable
from farm.table.rows import Row


def _traits(row: Row) -> set[tuple[str, str]]:
    return {("group", str(row.group))} | {(k, str(v)) for k, v in row.knobs.items()}


def ci_sample(rows: list[Row]) -> list[Row]:
    """The sample of `rows` (sorted by key): every (op, target, knobs.dtype) the models run, once."""
    forms: dict[tuple[str, str, str], list[Row]] = {}
    for row in sorted(rows, key=lambda r: r.key):
        if runnable(row.op, row.target):
            forms.setdefault((row.op, row.target, str(row.knobs.get("dtype", ""))), []).append(row)
    seen: dict[tuple[str, str], set[tuple[str, str]]] = {}
    chosen = []
    for (op, target, _), candidates in sorted(forms.items()):
        shown = seen.setdefault((op, target), set())
        best = max(candidates, key=lambda r: len(_traits(r) - shown))  # max keeps the first of equals
        shown |= _traits(best)
        chosen.append(best)
    return sorted(chosen, key=lambda r: r.key)

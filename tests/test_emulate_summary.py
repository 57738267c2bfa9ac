"""farm/emulate/summary.py: `farm emulate`'s table counts each object once by what it ended as, and shows per
output type the measure nearest its bound (an exact measure that holds never hides a real error). And the
order objects go to the workers: the last run's slowest first."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from farm.emulate.command import longest_first
from farm.emulate.outcome import CaseOutcome, Fact
from farm.emulate.summary import groups, table
from farm.emulate.task import ObjectResult, Task


@dataclass
class _Case:
    n: int

    def facts(self) -> dict[str, Fact]:
        return {"n": self.n}


def _result(key: str, *measures: tuple[str, float, float, str], stopped: str | None = None) -> ObjectResult:
    op, target, _ = key.split("/")
    outcome = CaseOutcome(_Case(1))
    for output, error, bound, dtype in measures:
        outcome.add(output, "c", error, bound, dtype)
    return ObjectResult(key, op, target, seconds=1.5, outcomes=[] if stopped else [outcome], stopped=stopped)


def test_the_table_counts_objects_and_shows_the_measure_nearest_its_bound() -> None:
    results = [
        # an exact measure that holds (0 of bound 0) first, then the real error of the same type
        _result("attn/gfx11-generic/a", ("lse", 0.0, 0.0, "f32"), ("lse", 2e-6, 1e-5, "f32"), ("o", 1e-3, 4e-3, "f16")),
        _result("attn/gfx11-generic/b", ("o", 5e-3, 4e-3, "f16")),  # outside
        _result("attn/gfx11-generic/c", stopped="stopped: Unsupported: v_foo at 0x100"),
        _result("attn/gfx12-generic/a", ("guard", float("inf"), 0.0, "")),  # a measure naming no type
    ]
    found = groups(results)
    assert list(found) == [("attn", "gfx11-generic"), ("attn", "gfx12-generic")]
    lines = table(found)
    assert lines[0].split() == ["family", "target", "objects", "within", "outside", "not", "emulated", "worst", "bf16",
                                "worst", "f16", "worst", "f32", "worst", "?", "seconds"]
    assert lines[1].split() == ["attn", "gfx11-generic", "3", "1", "1", "1", "-", "5.0e-03/4.0e-03",
                                "2.0e-06/1.0e-05", "-", "4.5"]
    assert lines[2].split() == ["attn", "gfx12-generic", "1", "0", "1", "0", "-", "-", "-", "inf/0.0e+00", "1.5"]
    assert lines[3].split() == ["all", "4", "1", "2", "1", "-", "5.0e-03/4.0e-03", "2.0e-06/1.0e-05",
                                "inf/0.0e+00", "6.0"]


def test_the_last_runs_slowest_objects_go_first_and_unknown_ones_before_them(tmp_path: Path) -> None:
    tasks = [Task(f"op/t/{name}", "op", "t", {}, b"", "m:check", "m", "llvm-mc") for name in "abcde"]
    latest = tmp_path / "latest-emulate.json"
    assert [t.key[-1] for t in longest_first(tasks, latest)] == list("abcde")  # no report: by key
    latest.write_text(json.dumps({"objects": [
        {"key": "op/t/a", "seconds": 1.0, "status": "within"}, {"key": "op/t/b", "seconds": 9.0, "status": "OUTSIDE"},
        {"key": "op/t/c", "seconds": 0.0, "status": "NOT EMULATED"}, {"key": "op/t/e", "seconds": 3.0,
                                                                      "status": "within"}]}))
    assert [t.key[-1] for t in longest_first(tasks, latest)] == list("cdbea")
    latest.write_text("{not json")
    assert [t.key[-1] for t in longest_first(tasks, latest)] == list("abcde")

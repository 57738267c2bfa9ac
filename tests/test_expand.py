"""conf/ -> instances/: counts, stable order, staleness, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, copy_project, last_line, run_farm

TARGETS = ["gfx11-generic", "gfx12-generic", "gfx90a", "gfx942", "gfx950"]


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    return copy_project(tmp_path)


def test_checked_in_table_is_fresh_and_complete(project: Path) -> None:
    proc = run_farm(project, "expand", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (REPO / "instances" / "rmsnorm.jsonl").read_text().splitlines()]
    assert len(rows) == 450
    for target in TARGETS:
        assert sum(r["target"] == target for r in rows) == 90
    keys = [(r["op"], r["target"], r["name"]) for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    per_target = [r for r in rows if r["target"] == "gfx942"]
    baked = [r for r in per_target if r["knobs"]["n"] > 0]
    assert len(baked) == 80 and all(r["knobs"]["dtype"] != "f32" for r in baked)
    assert sorted({r["knobs"]["n"] for r in baked}) == [2560, 3072, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384]
    generic = [r for r in per_target if r["knobs"]["n"] == 0]
    assert sorted({r["knobs"]["dtype"] for r in generic}) == ["bf16", "bf16_f32gamma", "f16", "f16_f32gamma", "f32"]


def test_backward_table(project: Path) -> None:
    rows = [json.loads(line) for line in (REPO / "instances" / "rmsnorm_bwd.jsonl").read_text().splitlines()]
    assert len(rows) == 315
    for target in TARGETS:
        mine = [r for r in rows if r["target"] == target]
        assert len(mine) == 63
        baked = [r for r in mine if r["knobs"]["n"] > 0]
        assert len(baked) == 48 and {r["knobs"]["dtype"] for r in baked} == {"bf16", "f16", "bf16_f32gamma",
                                                                              "f16_f32gamma"}
        assert sorted({r["knobs"]["n"] for r in baked})[0] == 1536 and len({r["knobs"]["n"] for r in baked}) == 12
        generic = [r for r in mine if r["knobs"]["n"] == 0]
        assert sorted({r["knobs"]["n_max"] for r in generic}) == [1024, 8192, 16384] and len(generic) == 15


def test_full_table_matches_the_reference_shipment_totals(project: Path) -> None:
    counts: dict[str, int] = {}
    for table in sorted((REPO / "instances").glob("*.jsonl")):
        for line in table.read_text().splitlines():
            target = json.loads(line)["target"]
            counts[target] = counts.get(target, 0) + 1
    assert counts == {"gfx11-generic": 309, "gfx12-generic": 381, "gfx950": 253, "gfx942": 255, "gfx90a": 255}
    assert sum(counts.values()) == 1453


def test_expand_is_deterministic(project: Path) -> None:
    before = (project / "instances" / "rmsnorm.jsonl").read_bytes()
    (project / "instances" / "rmsnorm.jsonl").unlink()
    proc = run_farm(project, "expand")
    assert proc.returncode == 0 and last_line(proc.stdout) == "rows=1453 changed_tables=1"
    assert (project / "instances" / "rmsnorm.jsonl").read_bytes() == before


def test_stale_table_is_detected(project: Path) -> None:
    conf = project / "conf" / "op" / "rmsnorm.yaml"
    conf.write_text(conf.read_text().replace("n: [2560, 3072,", "n: [2048, 2560, 3072,"))
    proc = run_farm(project, "expand", "--check")
    assert proc.returncode == 1 and "rmsnorm.jsonl" in proc.stdout
    plan = run_farm(project, "plan")
    assert plan.returncode == 2 and "run `farm expand`" in plan.stderr
    assert run_farm(project, "expand").returncode == 0
    assert run_farm(project, "expand", "--check").returncode == 0


@pytest.mark.parametrize(("args", "needle"), [
    (["targets=[gfx999]"], "unknown target 'gfx999'; accepted: gfx11-generic, gfx12-generic, gfx90a"),
    (["ops=[layernorm]"], "unknown op 'layernorm'; accepted: rmsnorm"),
    (["dtypes=[fp8]"], "unknown dtype 'fp8' for the selected ops; accepted: bf16, bf16_f32gamma, f16"),
    (["target=[gfx942]"], "unknown option 'target' in overrides; did you mean 'targets'?"),
    (["targets=[gfx942"], "malformed override"),
    (["targets"], "malformed override 'targets': overrides look like key=value"),
])
def test_bad_selection_is_one_clear_error(project: Path, args: list[str], needle: str) -> None:
    proc = run_farm(project, "plan", *args)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("n: [2560, 3072,", "n: [2561, 3072,", "n=2561"),
    ("n: [2560, 3072,", "n: [-8, 3072,", "n=-8"),
    ("n: [2560, 3072,", "n: [32768, 3072,", "n=32768"),
    ("dtype: [bf16, f16, bf16_f32gamma, f16_f32gamma]", "dtype: [bf16, f16, f32]", "f32"),
    ("phase: [infer, train]\n      n: [2560", "phase: [infer, training]\n      n: [2560", "training"),
    ("n: [2560, 3072,", "n: [2560, 2560, 3072,", "duplicate row"),
    ("'rmsnorm_{dtype}_{phase}_n{n}'", "'rmsnorm_{dtype}_n{n}'", "is also made by row"),
    ("'rmsnorm_{dtype}_{phase}_n{n}'", "'../{dtype}_{phase}_n{n}'", "leaves the safe alphabet"),
    ("'rmsnorm_{dtype}_{phase}_n{n}'", "'rmsnorm_{dtype}_{tile}'", "cannot be filled"),
])
def test_bad_rows_fail_expand(project: Path, old: str, new: str, needle: str) -> None:
    conf = project / "conf" / "op" / "rmsnorm.yaml"
    text = conf.read_text()
    assert old in text
    conf.write_text(text.replace(old, new, 1))
    before = (project / "instances" / "rmsnorm.jsonl").read_bytes()
    proc = run_farm(project, "expand")
    assert proc.returncode == 2, proc.stdout
    assert needle in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (project / "instances" / "rmsnorm.jsonl").read_bytes() == before  # nothing half-written


def test_unknown_verb_is_refused(project: Path) -> None:
    proc = run_farm(project, "biuld")
    assert proc.returncode == 2 and "unknown verb 'biuld'" in proc.stderr


@pytest.mark.parametrize(("op", "old", "new", "needle"), [
    ("sdpa_cdna", "head_dim: [64, 96, 128, 160, 192], causal: [0, 1], tile: [m128n64w4]",
     "head_dim: [64, 96, 128, 160, 512], causal: [0, 1], tile: [m128n64w4]", "head_dim=512"),
    ("sdpa_cdna", "{dtype: [bf16, f16], head_dim: [64, 96, 128, 160, 192], causal: [0, 1], tile: [m128n64w4]}",
     "{dtype: [bf16, f32], head_dim: [64, 96, 128, 160, 192], causal: [0, 1], tile: [m128n64w4]}",
     "knob dtype='f32' not supported"),
    ("sdpa_cdna", "causal: [0, 1], tile: [m128n64w4]}", "causal: [0, 1], tile: [m100n64w4]}", "tile='m100n64w4'"),
    ("sdpa_rdna", "head_dim: [64, 96, 128, 256]", "head_dim: [64, 100, 128, 256]", "head_dim=100 has no object"),
    ("sdpa_rdna", "head_dim_max: [64, 128, 256]", "head_dim_max: [64, 128, 320]", "head_dim_max=320"),
    ("sdpa_rdna_decode", "dtype: [bf16, f16]", "dtype: [bf16, fp8]", "knob dtype='fp8' not supported"),
])
def test_bad_attention_rows_fail_expand(project: Path, op: str, old: str, new: str, needle: str) -> None:
    conf = project / "conf" / "op" / f"{op}.yaml"
    text = conf.read_text()
    assert old in text
    conf.write_text(text.replace(old, new, 1))
    proc = run_farm(project, "expand")
    assert proc.returncode == 2 and needle in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr

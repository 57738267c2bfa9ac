"""farm/emulate/families.py and sample.py: every family and ISA the registry names can be loaded, and CI's
sample (`farm emulate --ci-sample`, run by .ci/run) holds one object of every family x target x dtype form the
registry runs, the same whatever the order of the table, and grows when the registry does."""

from __future__ import annotations

import inspect

import pytest
from conftest import REPO

from farm.emulate import families
from farm.emulate.sample import ci_sample
from farm.table.config import load as load_config
from farm.table.rows import Row, load_table


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    cfg = load_config(REPO, [])
    return [row for op in sorted(cfg.ops) for row in load_table(cfg, op)]


def _forms(rows: list[Row]) -> set[tuple[str, str, str]]:
    return {(r.op, r.target, str(r.knobs["dtype"])) for r in rows if families.runnable(r.op, r.target)}


def test_every_check_and_isa_of_the_registry_loads() -> None:
    for op in families.CHECKS:
        assert list(inspect.signature(families.check_of(op)).parameters)[:4] == ["program", "op", "knobs",
                                                                                 "decoder"], op
    for target in families.ISAS:
        assert "llvm_mc" in inspect.signature(families.decoder_of(target)).parameters, target
    assert families.refusal("rmsnorm", "gfx1030") == (
        "no model of gfx1030 (farm/emulate/families.py ISAS: " + ", ".join(sorted(families.ISAS)) + ")")
    assert families.refusal("layernorm", "gfx942").startswith("no check for the layernorm family")  # no such family


def test_the_ci_sample_is_one_object_per_form_the_registry_runs(rows: list[Row]) -> None:
    sample = ci_sample(rows)
    forms = _forms(rows)
    assert forms and sorted((r.op, r.target, str(r.knobs["dtype"])) for r in sample) == sorted(forms)
    assert all(families.runnable(r.op, r.target) for r in sample)
    assert [r.key for r in ci_sample(list(reversed(rows)))] == [r.key for r in sample]
    # within a family and target, the forms' objects come from as many of its groups (generic and baked tiers,
    # tile groups) as there are forms: every group when there are fewer groups than dtypes, else one per form
    for op, target in {(r.op, r.target) for r in sample}:
        groups = {r.group for r in rows if (r.op, r.target) == (op, target)}
        chosen = [r.group for r in sample if (r.op, r.target) == (op, target)]
        assert len(set(chosen)) == min(len(groups), len(chosen)), (op, target, chosen, groups)


def test_the_ci_sample_grows_with_the_registry(rows: list[Row], monkeypatch: pytest.MonkeyPatch) -> None:
    for op in ("sdpa_rdna", "sdpa_rdna4", "sdpa_rdna_decode"):  # the registry without the attention families
        monkeypatch.delitem(families.CHECKS, op, raising=False)
    before = ci_sample(rows)
    monkeypatch.setitem(families.CHECKS, "sdpa_rdna", "farm.emulate.rmsnorm_check:check")
    monkeypatch.setitem(families.ISAS, "gfx12-generic", "amdgpu_models.isa.gfx11")
    after = ci_sample(rows)
    assert {r.key for r in before} < {r.key for r in after}
    assert {(r.op, r.target) for r in after} >= {("sdpa_rdna", "gfx11-generic"), ("rmsnorm", "gfx12-generic")}
    assert len(after) == len(_forms(rows))


def test_ci_runs_the_sample() -> None:
    lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if "farm emulate" in line
             and not line.lstrip().startswith(("#", "echo"))]
    assert lines and all("--ci-sample" in line for line in lines), lines

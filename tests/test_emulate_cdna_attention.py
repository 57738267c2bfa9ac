"""sdpa_cdna (gfx942) and sdpa_cdna_dualwave (gfx950) on the CDNA model (slow): two objects built from this
checkout run within; the same rows built from mutated kernel sources are reported outside (a causal mask
shifted by one key, the dualwave merge's two weights swapped, the LSE's ln 2 dropped), and a built object whose
v_exp_f32 became v_mov_b32 stops or is outside. One project copy is built twice: the original rows, then the
mutated ones (each output is reached by one mutation only: the causal mask by the single-wave causal object's O; the
merge weights and the LSE's ln 2 by the non-causal dualwave object's O and LSE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import copy_project, run_farm
from corrupt import assert_stopped_or_outside, vop1_as
from gfx11_asm import assembler
from object_runs import run_object

from amdgpu_models.isa import cdna
from farm.emulate.attention import forward_check, tolerance
from farm.emulate.attention.cases import bucket_forward_cases
from farm.emulate.launch import NotLaunchable

SINGLE = ("sdpa_cdna", "gfx942", "sdpa_bf16_d64_c1_m64n64w4")
DUAL = ("sdpa_cdna_dualwave", "gfx950", "sdpa_dw_bf16_d128_c0_m128n128w8")
SOURCE = "sdpa_cdna/sdpa_fwd.py"
# (text, its replacement, the row it reaches, the output reported outside)
MUTATIONS = {
    "causal mask shifted by one": (
        "row_limit = _imin(a.seqlen_k - 1, my_m + (a.seqlen_k - a.seqlen_q))",
        "row_limit = _imin(a.seqlen_k - 1, my_m + 1 + (a.seqlen_k - a.seqlen_q))", SINGLE, "o"),
    "dualwave merge weights swapped": (
        "o_acc.append(o0[t] * a0 + theirs * a1)", "o_acc.append(o0[t] * a1 + theirs * a0)", DUAL, "o"),
    "ln 2 dropped from LSE": (
        "lse = seen.select((m * ctx.scale_log2 + log2_l) * LN2, fx.Float32(NEG_INF))",
        "lse = seen.select(m * ctx.scale_log2 + log2_l, fx.Float32(NEG_INF))", DUAL, "lse"),
}


def _build(project: Path) -> dict[tuple[str, str, str], bytes]:
    rows = (SINGLE, DUAL)
    run_farm(project, "build", f"ops=[{','.join(r[0] for r in rows)}]", f"targets=[{','.join(r[1] for r in rows)}]",
             f"names=[{','.join('/'.join(r) for r in rows)}]", check=True)
    return {row: (project / "outputs" / row[0] / row[1] / f"{row[2]}.hsaco").read_bytes() for row in (SINGLE, DUAL)}


def test_cdna_cases_cover_the_buckets_the_run_time_head_dims_and_the_lse() -> None:
    cases = bucket_forward_cases({"dtype": "bf16", "head_dim": 192, "head_dim_v": 128, "causal": 1,
                                  "tile": "m128n64w4"}, 128)
    assert [(c.name, c.head_dim, c.head_dim_v, c.write_lse) for c in cases] == [
        ("aligned", 192, 128, False), ("ragged", 184, 120, True), ("masked", 184, 120, True)]
    assert (cases[0].seqlen_q, cases[1].seqlen_q, cases[1].seqlen_k) == (128, 141, 149)
    plain = bucket_forward_cases({"dtype": "f16", "head_dim": 64, "causal": 0, "tile": "m64n64w4"}, 64)
    assert [(c.name, c.head_dim, c.head_dim_v) for c in plain] == [("aligned", 64, 64), ("ragged", 56, 56)]
    assert forward_check.tile_block_m({"tile": "m128n128w8"}, 512) == 128
    with pytest.raises(NotLaunchable, match="does not name the object's 256-thread block"):
        forward_check.tile_block_m({"tile": "m128n128w8"}, 256)


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """(original, mutated) object bytes per row: both rows built from this checkout, then from the sources with
    every mutation applied, in one copy of the project."""
    project = copy_project(tmp_path_factory.mktemp("cdna_attention"))
    original = _build(project)
    path = project / "kernels_src" / SOURCE
    text = path.read_text()
    for old, new, _, _ in MUTATIONS.values():
        assert text.count(old) == 1, f"{old!r} is not once in {SOURCE}"
        text = text.replace(old, new)
    path.write_text(text)
    return original, _build(project)


@pytest.fixture(scope="module")
def original_runs(objects: tuple[dict, dict]) -> dict:
    return {row: run_object(data, *row) for row, data in objects[0].items()}


@pytest.fixture(scope="module")
def mutated_runs(objects: tuple[dict, dict]) -> dict:
    return {row: run_object(data, *row) for row, data in objects[1].items()}


@pytest.mark.slow
@pytest.mark.parametrize("row", [SINGLE, DUAL], ids=["single", "dualwave"])
def test_built_cdna_attention_objects_are_within(original_runs: dict, row: tuple[str, str, str]) -> None:
    outcomes = original_runs[row]
    assert outcomes and all(o.within for o in outcomes), [(o.case.facts(), o.measures) for o in outcomes]
    criteria = {m.criterion for o in outcomes for m in o.measures}
    assert {tolerance.LOWP, tolerance.ELEMENTWISE, tolerance.LSE_RULE} <= criteria
    if "_c1_" in row[2]:
        assert {tolerance.MASKED_O, tolerance.MASKED_LSE} <= criteria


@pytest.mark.slow
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_mutated_cdna_kernel_source_is_outside(objects: tuple[dict, dict], original_runs: dict,
                                                 mutated_runs: dict, mutation: str) -> None:
    _, _, row, output = MUTATIONS[mutation]
    assert objects[1][row] != objects[0][row]  # the mutations reached the object
    mutated = mutated_runs[row]

    def within(outcome) -> bool:
        return all(m.within for m in outcome.measures if m.output == output)

    caught = [o.case.name for o, m in zip(original_runs[row], mutated, strict=True) if within(o) and not within(m)]
    assert caught, [(o.case.name, o.measures) for o in mutated]


@pytest.mark.slow
def test_a_corrupted_cdna_instruction_stops_the_run_or_is_outside(objects: tuple[dict, dict]) -> None:
    """v_exp_f32 (GFX9 VOP1 opcode 0x20) turned into v_mov_b32 (opcode 1) in the built gfx942 object."""
    op, target, name = SINGLE
    data = vop1_as(objects[0][SINGLE], lambda text, address: cdna.decode(cdna.ISAS[target], text, address,
                                                                          assembler(), target), "v_exp_f32")
    assert_stopped_or_outside(lambda: run_object(data, op, target, name))

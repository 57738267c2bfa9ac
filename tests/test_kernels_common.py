"""kernels_src/common/: the helpers the kernel families share, and the rules that keep them honest
(specs stay pure Python, FlyDSL internals are used in one module only, SOURCE.md says so)."""

from __future__ import annotations

import ast
import json
import operator
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent / "kernels_src"
sys.path.insert(0, str(KERNELS))

from common import knobs, norm, trace  # noqa: E402
from common.dtypes import ELEM_BYTES, vec_elems  # noqa: E402

COMPAT = "common/flydsl_compat.py"
FAMILIES = sorted(p.name for p in KERNELS.iterdir() if (p / "SOURCE.md").is_file() and p.name != "common")


def test_tree_folds_pairwise_in_a_fixed_order() -> None:
    """The order (hence any rounding) is ((a b)(c d)) e: one fixed tree, not a left-to-right chain."""
    assert trace.tree(list("abcde")) == "abcde"
    assert trace.tree([1, 2, 3, 4, 5], lambda a, b: f"({a}{b})") == "(((12)(34))5)"
    assert trace.tree([7]) == 7
    assert trace.tree([3.0, 1.0, 2.0], max) == 3.0
    assert trace.tree([1, 2, 3], operator.mul) == 6


def test_put_stores_through_a_call() -> None:
    array = [0, 0, 0]
    trace.put(array, 1, 5)
    assert array == [0, 5, 0]


def test_check_keys_names_missing_and_unknown_knobs() -> None:
    knobs.check_keys("op", {"a": 1, "b": 2}, ("a",), ("b",))
    with pytest.raises(ValueError, match=r"knobs missing \['b'\]; op needs \['a', 'b'\]"):
        knobs.check_keys("op", {"a": 1}, ("a", "b"))
    with pytest.raises(ValueError, match=r"unknown knobs \['c'\]; op accepts \['a'\] and optionally \['b'\]"):
        knobs.check_keys("op", {"a": 1, "c": 3}, ("a",), ("b",))
    with pytest.raises(ValueError, match="knobs must be a dict .*; got list"):
        knobs.check_keys("op", [1], ("a",))


def test_check_choice_and_int_refuse_bools_and_strangers() -> None:
    knobs.check_choice("mask", "none", ("none", "causal"))
    with pytest.raises(ValueError, match=r"knob mask='x' not supported; accepted: \['none', 'causal'\]"):
        knobs.check_choice("mask", "x", ("none", "causal"))
    with pytest.raises(ValueError, match="knob causal=True not supported"):
        knobs.check_choice("causal", True, (0, 1))
    with pytest.raises(ValueError, match="not supported"):
        knobs.check_choice("dtype", ["bf16"], ("bf16",))  # unhashable: refused, not a TypeError
    assert knobs.check_int("n", 8, "any") == 8
    with pytest.raises(ValueError, match="knob n=True must be an int; accepted: 0 or more"):
        knobs.check_int("n", True, "0 or more")


@pytest.mark.parametrize(("n", "dtype", "needle"), [
    (32768, "bf16", "exceeds the largest baked width 16384; use n=0 instead"),
    (4096, "f32", "only offered for 16-bit x forms ['bf16', 'bf16_f32gamma', 'f16', 'f16_f32gamma']"),
    (4100, "f16_f32gamma", "not a multiple of the vector width 8 elements"),
])
def test_norm_width_refusals(n: int, dtype: str, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        norm.check_width(n, dtype, "n=0")
    assert needle in str(info.value)


def test_norm_tables_agree_with_the_access_width() -> None:
    norm.check_width(16384, "bf16_f32gamma", "n=0")
    assert vec_elems("bf16") == 8 and vec_elems("f32") == 4
    assert {norm.vec_elems(d) for d in norm.NORM_FORMS} == {8, 4}
    assert all(ELEM_BYTES[x] in (2, 4) and ELEM_BYTES[g] in (2, 4) for x, g in norm.NORM_FORMS.values())


def _run(code: str, env: dict[str, str]) -> str:
    full = {k: v for k, v in os.environ.items() if k not in ("ARCH", "FLYDSL_GPU_ARCH", "HSA_OVERRIDE_GFX_VERSION")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=KERNELS, env=full | env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("arch", "python_arch", "wave"), [
    ("gfx11-generic", "gfx1100", 32), ("gfx12-generic", "gfx1200", 32), ("gfx942", "gfx942", 64)])
def test_arch_is_resolved_from_flydsl_gpu_arch_not_the_target_name(arch: str, python_arch: str, wave: int) -> None:
    """The farm's compile process sets both variables; every family plans for the concrete chip."""
    out = _run("import json; from common.arch import target_arch, wave_size; "
               "print(json.dumps([target_arch(), wave_size()]))",
               {"ARCH": arch, "FLYDSL_GPU_ARCH": python_arch.upper()})
    assert json.loads(out) == [python_arch, wave]


def test_spec_modules_load_neither_flydsl_nor_torch() -> None:
    """The farm runs spec code before any toolchain is loaded: specs and the common modules they use stay pure."""
    specs = ["rmsnorm.spec", "rmsnorm_bwd.spec", "sdpa_cdna.spec", "sdpa_decode.spec", "sdpa_rdna.spec",
             "sdpa_rdna.spec_rdna4"]
    code = ("import importlib, json, sys\n"
            f"for m in {specs!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('flydsl', 'torch'))))")
    assert json.loads(_run(code, {})) == []


def _private_flydsl_uses(path: Path) -> list[str]:
    """`flydsl._x` imports and `._ptr`-style attribute reads of FlyDSL internals in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flydsl."):
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"from {node.module}")
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names
                      if a.name.startswith("flydsl.") and any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr in ("_ptr", "_mlir"):
            found.append(f".{node.attr}")
    return found


def test_flydsl_internals_are_used_in_one_module_only() -> None:
    users = {p.relative_to(KERNELS).as_posix(): _private_flydsl_uses(p) for p in sorted(KERNELS.rglob("*.py"))}
    assert [rel for rel, uses in users.items() if uses] == [COMPAT]
    assert "from flydsl._mlir" in users[COMPAT]


@pytest.mark.parametrize("family", FAMILIES)
def test_source_md_is_truthful_about_private_apis(family: str) -> None:
    """A family that imports the compat module says so; one that does not may claim 'only public APIs'."""
    text = (KERNELS / family / "SOURCE.md").read_text()
    uses_compat = any("common.flydsl_compat" in p.read_text() for p in (KERNELS / family).glob("*.py"))
    assert ("only from FlyDSL" in text or "only from\nFlyDSL" in text) != uses_compat, family
    if uses_compat:
        assert "flydsl_compat.py" in text and "private" in text
    for ref in ("../", "TOOLCHAIN.md", "INFRA.md", "farm/compile/", "op_config.yaml", "alt_trace_args("):
        assert ref not in text, (family, ref)

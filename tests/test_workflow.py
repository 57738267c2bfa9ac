"""The workflow users run most: add a row, retune a row, edit one family's source; only that rebuilds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import built_copy, last_line, latest_report, run_farm, shrink_op

pytestmark = pytest.mark.slow


@pytest.fixture()
def project(built: Path, tmp_path: Path) -> Path:
    return built_copy(built, tmp_path / "p")


def snapshot(project: Path) -> dict[str, bytes]:
    out = project / "outputs"
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.hsaco"))}


def entries(project: Path) -> dict[str, str]:
    """Every manifest entry, as canonical JSON, keyed by op/target/file."""
    found = {}
    for mpath in sorted((project / "outputs").rglob("manifest.json")):
        rel = mpath.parent.relative_to(project / "outputs").as_posix()
        for entry in json.loads(mpath.read_text())["objects"]:
            found[f"{rel}/{entry['file']}"] = json.dumps(entry, sort_keys=True)
    return found


def built_keys(project: Path) -> list[str]:
    report = latest_report(project)
    return sorted(r["key"] for r in report["rows"] if r["written"])


def test_adding_a_baked_width_builds_exactly_the_new_rows(project: Path) -> None:
    table = project / "instances" / "rmsnorm.jsonl"
    before_rows = table.read_text().splitlines()
    before_objects, before_entries = snapshot(project), entries(project)
    conf = project / "conf" / "op" / "rmsnorm.yaml"
    conf.write_text(conf.read_text().replace("n: [2560, 16384]", "n: [2560, 4096, 16384]"))

    run_farm(project, "expand", check=True)
    after_rows = table.read_text().splitlines()
    added = sorted(set(after_rows) - set(before_rows))
    assert not set(before_rows) - set(after_rows)  # nothing removed or rewritten
    new_keys = sorted(f"{r['op']}/{r['target']}/{r['name']}" for r in map(json.loads, added))
    assert len(new_keys) == 10 and all("_n4096" in k for k in new_keys)  # 2 dtypes x 5 targets

    plan = run_farm(project, "plan", check=True)
    assert last_line(plan.stdout) == "rows=40 up_to_date=30 to_build=10"
    planned = sorted(line.split()[1] for line in plan.stdout.splitlines()[:-1])
    assert planned == new_keys and all(line.startswith("new ") for line in plan.stdout.splitlines()[:-1])

    run_farm(project, "build", check=True)
    assert built_keys(project) == new_keys
    after_objects, after_entries = snapshot(project), entries(project)
    assert {k: after_objects[k] for k in before_objects} == before_objects
    assert {k: after_entries[k] for k in before_entries} == before_entries
    assert len(after_objects) == 40
    assert run_farm(project, "check").returncode == 0


def test_retuning_one_row_rebuilds_that_row_only(project: Path) -> None:
    before_objects, before_entries = snapshot(project), entries(project)
    conf = project / "conf" / "op" / "rmsnorm.yaml"
    conf.write_text(conf.read_text() + "tuning:\n  - match: {dtype: bf16, n: 2560}\n    targets: [gfx942]\n"
                                       "    set: {block: 256}\n")
    run_farm(project, "expand", check=True)
    plan = run_farm(project, "plan", check=True)
    assert last_line(plan.stdout) == "rows=30 up_to_date=29 to_build=1"
    assert "inputs-changed  rmsnorm/gfx942/rmsnorm_bf16_train_n2560  (row knobs changed)" in plan.stdout
    run_farm(project, "build", check=True)
    key = "rmsnorm/gfx942/rmsnorm_bf16_train_n2560.hsaco"
    assert built_keys(project) == ["rmsnorm/gfx942/rmsnorm_bf16_train_n2560"]
    after_objects, after_entries = snapshot(project), entries(project)
    assert after_objects[key] != before_objects[key]
    assert json.loads(after_entries[key])["kernels"][0]["max_flat_workgroup_size"] == 256
    assert {k: v for k, v in after_objects.items() if k != key} == {k: v for k, v in before_objects.items() if k != key}
    assert {k: v for k, v in after_entries.items() if k != key} == {k: v for k, v in before_entries.items() if k != key}
    assert run_farm(project, "check").returncode == 0


SMALL_BWD_GROUPS = """groups:
  - name: baked
    name_format: 'rmsnorm_bwd_{dtype}_n{n}'
    axes:
      dtype: [bf16]
      n: [4096]
      n_max: [0]
  - name: generic
    name_format: 'rmsnorm_bwd_{dtype}_generic{n_max}'
    axes:
      dtype: [f32]
      n: [0]
      n_max: [1024]
"""


def test_editing_the_backward_source_rebuilds_backward_rows_only(small_project: Path, tmp_path: Path) -> None:
    project = tmp_path / "p"
    shutil.copytree(small_project, project, ignore=shutil.ignore_patterns(".farm", "outputs"))
    shrink_op(project, "rmsnorm_bwd", SMALL_BWD_GROUPS)
    selection = ("ops=[rmsnorm,rmsnorm_bwd]", "targets=[gfx942,gfx11-generic]")
    run_farm(project, "expand", *selection, check=True)
    run_farm(project, "build", *selection, check=True)
    before = snapshot(project)
    assert sum(k.startswith("rmsnorm_bwd/") for k in before) == 4 and len(before) == 16

    src = project / "kernels_src" / "rmsnorm_bwd" / "rmsnorm_bwd.py"
    src.write_text(src.read_text() + "\n# a comment-only edit still changes the input digest\n")
    plan = run_farm(project, "plan", *selection, check=True)
    assert last_line(plan.stdout) == "rows=16 up_to_date=12 to_build=4"
    assert all(line.split()[1].startswith("rmsnorm_bwd/") for line in plan.stdout.splitlines()[:-1])
    run_farm(project, "build", *selection, check=True)
    assert all(k.startswith("rmsnorm_bwd/") for k in built_keys(project)) and len(built_keys(project)) == 4
    after = snapshot(project)
    assert {k: v for k, v in after.items() if k.startswith("rmsnorm/")} == {
        k: v for k, v in before.items() if k.startswith("rmsnorm/")}
    assert run_farm(project, "check", *selection).returncode == 0

"""The typed records between stages (manifest Entry and its Inputs, build report rows) describe exactly what the
farm writes, and a manifest read back from disk stays data: a malformed field is named, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import built_copy, latest_report, run_farm

from farm.contract import REPORT_FIELDS
from farm.observe.report import BuildReport, ReportRow
from farm.observe.trace import TimedRow, chrome_trace
from farm.store import manifest

SEL = "targets=[gfx942]"


def _manifest(project: Path) -> Path:
    return project / "outputs" / "rmsnorm" / "gfx942" / "manifest.json"


@pytest.mark.slow
def test_written_manifest_and_report_have_exactly_the_typed_fields(built: Path) -> None:
    data = json.loads(_manifest(built).read_text())
    assert set(data) == set(manifest.Manifest.__annotations__)
    for entry in data["objects"]:
        assert set(entry) == manifest.Entry.__required_keys__, entry["file"]
        assert set(entry["inputs"]) == manifest.Inputs.__required_keys__, entry["file"]  # no row here sets options
    assert manifest.Inputs.__optional_keys__ == {"llvm_options"}
    report = latest_report(built)
    assert BuildReport.__required_keys__ <= set(report) <= BuildReport.__required_keys__ | BuildReport.__optional_keys__
    for row in report["rows"]:
        assert set(row) <= ReportRow.__optional_keys__, row["key"]


def test_report_row_holds_every_result_field_and_the_timeline_reads_only_report_fields() -> None:
    assert set(REPORT_FIELDS) | {"written", "refused", "reverified", "restored"} == ReportRow.__optional_keys__
    assert TimedRow.__optional_keys__ <= ReportRow.__optional_keys__
    # A re-verified row (no times) has no event; a timed one has its lane and its event.
    rows: list[ReportRow] = [
        {"key": "a/b/c", "ok": True, "reverified": True, "written": False, "refused": None},
        {"key": "a/b/d", "ok": True, "node": "n", "pid": 7, "started_unix": 10.0, "finished_unix": 10.5,
         "warnings": ["w"]},
    ]
    events = [e for e in chrome_trace(rows)["traceEvents"] if e["pid"] != 0]  # pid 0: the driver's own lanes
    assert [(e["ph"], e["name"]) for e in events] == [("M", "process_name"), ("M", "thread_name"), ("X", "a/b/d")]
    assert events[-1]["dur"] == 500000 and events[-1]["args"] == {"warnings": 1}


def test_source_md_of_an_entry_with_malformed_inputs_lists_the_others() -> None:
    cfg = SimpleNamespace(ops={}, kernels_dir=Path("/nonexistent"), toolchain_pin={})
    good = {"file": "a.hsaco", "name": "a", "inputs": {"sources": {"fam/a.py": "1" * 64}}}
    for bad_inputs in ("junk", {"sources": ["fam/b.py"]}, None):
        entries = {"a.hsaco": good, "b.hsaco": {"file": "b.hsaco", "name": "b", "inputs": bad_inputs}}
        text = manifest.render_source_md(cfg, "op", "gfx942", entries)  # type: ignore[arg-type]
        assert f"- `kernels_src/fam/a.py` {'1' * 64}" in text and "fam/b.py" not in text


@pytest.mark.slow
def test_entry_with_malformed_inputs_is_named_by_check_and_rebuilt_by_build(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    path = _manifest(project)
    data = json.loads(path.read_text())
    bad = data["objects"][0]["file"]
    data["objects"][0]["inputs"] = "junk"
    path.write_text(json.dumps(data))

    check = run_farm(project, "check", SEL)
    assert check.returncode == 1 and "Traceback" not in check.stderr, check.stderr
    assert f"{bad}: input_digest does not match the recorded inputs (manifest edited)" in check.stdout

    build = run_farm(project, "build", SEL)
    assert build.returncode == 0 and "Traceback" not in build.stderr, build.stderr
    assert json.loads(path.read_text())["objects"][0]["inputs"] != "junk"
    assert run_farm(project, "check", SEL).returncode == 0

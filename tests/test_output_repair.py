"""What `farm check` calls wrong, `farm build` repairs, and a full disk leaves no object that no manifest
records (issue 37, cases 11 and 12)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SESSION_CLUSTERS, built_copy, last_line, run_farm

from farm.core.canonical import canonical_json

pytestmark = pytest.mark.slow

TARGET = "gfx942"
SEL = f"targets=[{TARGET}]"
# Two rows of one target whose objects differ (a copy of one over the other is what case 11 did).
SWAPPED = ("rmsnorm_bf16_train_n2560", "rmsnorm_f16_f32gamma_train_n2560")


def where(project: Path) -> Path:
    return project / "outputs" / "rmsnorm" / TARGET


def entries(project: Path) -> dict[str, dict]:
    return {e["file"]: e for e in json.loads((where(project) / "manifest.json").read_text())["objects"]}


def rewrite_entries(project: Path, edit: dict[str, dict]) -> None:
    """Set fields of some entries and write the manifest back exactly as the farm writes it (canonical)."""
    path = where(project) / "manifest.json"
    data = json.loads(path.read_text())
    for entry in data["objects"]:
        entry.update(edit.get(entry["file"], {}))
    path.write_text(canonical_json(data))


def swap(project: Path, source: str, victim: str) -> None:
    """Copy `source`'s object over `victim`'s and make the victim's sha256 and size match what is there now."""
    data = (where(project) / f"{source}.hsaco").read_bytes()
    (where(project) / f"{victim}.hsaco").write_bytes(data)
    rewrite_entries(project, {f"{victim}.hsaco": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}})


def edit_instruction_classes(project: Path, name: str) -> None:
    """Change only the recorded instruction classes of one entry: every fact its ELF gives still matches, so
    only a disassembly of the object shows the entry is not its record (as for two rows whose objects
    differ only in their code, e.g. bf16 and f16 forms of one kernel)."""
    entry = entries(project)[f"{name}.hsaco"]
    code_object, kernels = entry["code_object"], entry["kernels"]
    code_object["instructions"]["valu"] += 1
    kernels[0]["instructions"]["valu"] += 1
    rewrite_entries(project, {f"{name}.hsaco": {"code_object": code_object, "kernels": kernels}})


def fix_for(name: str | None = None) -> str:
    return f"; fix: `farm build ops=[rmsnorm] targets=[{TARGET}]" + (f" names=[{name}]`" if name else "`")


def private_env(tmp_path: Path) -> dict[str, str]:
    """A temp directory of the test's own: the farm's private files (its record memo) start empty there."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp)}


@pytest.mark.parametrize("memo", ["empty", "filled by check"])
def test_swapped_object_with_matching_entry_is_planned_rebuilt_and_repaired(built: Path, tmp_path: Path,
                                                                            memo: str) -> None:
    """Case 11: an object copied over another, its entry's sha256 and size rewritten to match. Plan names it,
    whether the record memo knows the copied object (check filled it) or nothing (every object disassembled);
    check ends the line with the command that repairs it; build rebuilds it; then everything checks clean."""
    project = built_copy(built, tmp_path / "p")
    env = private_env(tmp_path)
    if memo == "filled by check":
        assert run_farm(project, "check", SEL, env=env).returncode == 0
    source, victim = SWAPPED
    before = (where(project) / f"{victim}.hsaco").read_bytes()
    swap(project, source, victim)

    check = run_farm(project, "check", SEL, env=env)
    assert check.returncode == 1
    line = f"DRIFT {where(project) / victim}.hsaco: manifest 'code_object' does not match the object"
    assert line in check.stdout and fix_for(victim) in check.stdout, check.stdout

    plan = run_farm(project, "plan", SEL, env=env)
    assert f"tampered        rmsnorm/{TARGET}/{victim}  ({victim}.hsaco: manifest 'code_object' does not match " \
           "the object" in plan.stdout, plan.stdout
    assert last_line(plan.stdout) == "rows=6 up_to_date=5 to_build=1"

    build = run_farm(project, "build", SEL, env=env, driver_env=True)
    assert build.returncode == 0, build.stderr
    assert "built 1, failed 0, up to date 5" in build.stderr
    assert (where(project) / f"{victim}.hsaco").read_bytes() == before
    assert run_farm(project, "check", SEL, env=env).returncode == 0
    assert last_line(run_farm(project, "plan", SEL, env=env).stdout) == "rows=6 up_to_date=6 to_build=0"


@pytest.mark.parametrize("memo", ["empty", "filled by check"])
def test_entry_whose_instruction_classes_are_not_its_objects_is_planned_rebuilt(built: Path, tmp_path: Path,
                                                                               memo: str) -> None:
    """What only a disassembly shows: plan finds it too (disassembling the object when its record is not
    remembered), and build repairs it."""
    project = built_copy(built, tmp_path / "p")
    env = private_env(tmp_path)
    if memo == "filled by check":
        assert run_farm(project, "check", SEL, env=env).returncode == 0
    name = SWAPPED[1]
    edit_instruction_classes(project, name)
    check = run_farm(project, "check", SEL, env=env)
    assert f"DRIFT {where(project) / name}.hsaco: manifest 'code_object' does not match the object" \
           f" (manifest edited or object replaced){fix_for(name)}" in check.stdout, check.stdout
    plan = run_farm(project, "plan", SEL, env=env)
    assert f"tampered        rmsnorm/{TARGET}/{name}  ({name}.hsaco: manifest 'code_object' does not match" \
           in plan.stdout, plan.stdout
    assert run_farm(project, "build", SEL, env=env, driver_env=True).returncode == 0
    assert run_farm(project, "check", SEL, env=env).returncode == 0


def test_entry_fields_check_names_are_planned_rebuilt(built: Path, tmp_path: Path) -> None:
    """Entries edited in ways check names (a size, a row field, the knobs but not the inputs recording them,
    an input digest): plan rebuilds each row."""
    project = built_copy(built, tmp_path / "p")
    env = private_env(tmp_path)
    files = sorted(entries(project))
    first = entries(project)[files[0]]
    knobs = dict(entries(project)[files[3]]["knobs"], block=1)
    rewrite_entries(project, {files[0]: {"size": first["size"] + 1},
                              files[1]: {"group": "another"},
                              files[2]: {"input_digest": "0" * 64},
                              files[3]: {"knobs": knobs}})
    plan = run_farm(project, "plan", SEL, env=env)
    assert f"{files[0]} size differs from its manifest entry" in plan.stdout, plan.stdout
    assert "its manifest entry's 'group' is not the row's in instances/" in plan.stdout
    assert "its manifest entry's input_digest does not match its recorded inputs" in plan.stdout
    assert "its manifest entry's 'knobs' is not the one its inputs record (manifest edited)" in plan.stdout
    assert last_line(plan.stdout) == "rows=6 up_to_date=2 to_build=4"
    assert run_farm(project, "build", SEL, env=env, driver_env=True).returncode == 0
    assert run_farm(project, "check", SEL, env=env).returncode == 0


def test_plan_reads_records_from_the_memo_and_disassembles_only_what_it_does_not_know(built: Path,
                                                                                      tmp_path: Path) -> None:
    """After a check, plan derives nothing again for an intact tree; the one object whose entry is not the
    record remembered for its bytes is disassembled, and found out. (The disassembler is watched in-process.)"""
    project = built_copy(built, tmp_path / "p")
    env = private_env(tmp_path)
    assert run_farm(project, "check", SEL, env=env).returncode == 0  # fills this tree's memo
    edit_instruction_classes(project, SWAPPED[1])
    code = (
        "import json, sys\n"
        "import farm.toolchain.disasm as d\n"
        "from farm.plan.decide import decide\n"
        "from farm.table.config import find_project_root, load\n"
        "from farm.cli.selection import selected_rows\n"
        "seen = []\n"
        "real = d.count_many\n"
        "def counting(pin, mcpu, objects):\n"
        "    seen.append(len(objects))\n"
        "    return real(pin, mcpu, objects)\n"
        "d.count_many = counting\n"
        f"cfg = load(find_project_root(), ['{SEL}'])\n"
        "rows, _ = selected_rows(cfg)\n"
        "print(json.dumps({'statuses': sorted(x.status for x in decide(cfg, rows)), 'disassembled': seen}))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    assert said == {"statuses": ["tampered"] + ["up-to-date"] * 5, "disassembled": [1]}


def test_full_disk_while_writing_the_manifest_leaves_no_unrecorded_object(built: Path, tmp_path: Path) -> None:
    """Case 12: the disk refuses the manifest once the batch's objects are written. A real write failure:
    the build's own process gets a file-size limit (RLIMIT_FSIZE: write(2) fails with EFBIG past it) for its
    flushes, under a manifest's size and over any object's. No object of the batch is left under its final
    name, no temporary stays, the manifest is the last good one, and the next build resumes."""
    project = built_copy(built, tmp_path / "p")
    lost = ["rmsnorm_bf16_train_n2560.hsaco", "rmsnorm_f32_infer_generic.hsaco"]
    for name in lost:
        (where(project) / name).unlink()
    manifest = (where(project) / "manifest.json").read_bytes()
    largest = max(p.stat().st_size for p in where(project).glob("*.hsaco"))
    limit = largest + 4096
    assert limit < len(manifest) / 2  # the manifest cannot fit, any object can
    code = (
        "import resource, signal, sys\n"
        "import farm.build as b\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit, write(2) fails with EFBIG instead\n"
        "real = b.DirectoryWriter.flush\n"
        "def flush(self):\n"
        f"    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))\n"
        "    try:\n"
        "        real(self)\n"
        "    finally:\n"
        "        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
        "b.DirectoryWriter.flush = flush\n"
        "from farm.cli import main\n"
        # The rows go to the session's standing cluster: the limit is the writer's, the build's own process.
        f"sys.exit(main(['build', '{SEL}', 'executor.standing_root={SESSION_CLUSTERS.root_for_builds()}']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 2 and "File too large" in proc.stderr, proc.stderr
    names = sorted(p.name for p in where(project).iterdir())
    assert not [n for n in names if n in lost or n.endswith(".tmp")], names
    assert (where(project) / "manifest.json").read_bytes() == manifest
    assert "0 objects of this build were recorded" in proc.stderr and "free disk space" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert run_farm(project, "build", SEL, check=True).returncode == 0
    assert run_farm(project, "check", SEL).returncode == 0


def test_check_names_every_file_it_does_not_expect_and_build_repairs_what_it_made(built: Path,
                                                                                  tmp_path: Path) -> None:
    """A directory as a failed build of old left it (objects under their names, no manifest), with a temporary
    of a killed writer and a file the farm never makes: check names each one, with what repairs it. Build
    records the objects (compiling them again), removes the dead writer's temporary, keeps the foreign file."""
    project = built_copy(built, tmp_path / "p")
    (where(project) / "manifest.json").unlink()
    (where(project) / "SOURCE.md").unlink()
    objects = sorted(p.name for p in where(project).glob("*.hsaco"))
    dead = subprocess.Popen(["true"])
    dead.wait()
    temporary = where(project) / f".{objects[0]}.{dead.pid}.0123456789abcdef.tmp"
    temporary.write_bytes(b"half")
    foreign = where(project) / "notes.txt"
    foreign.write_text("mine")

    check = run_farm(project, "check", SEL)
    assert check.returncode == 1
    drift = [line for line in check.stdout.splitlines() if line.startswith("DRIFT ")]
    for name in objects:
        assert any(f"{where(project) / name}: file not recorded in manifest.json" in line
                   and line.endswith(fix_for(name.removesuffix(".hsaco"))) for line in drift), (name, drift)
    assert any(str(temporary) in line and "a temporary of a farm write" in line and line.endswith(fix_for())
               for line in drift), drift
    assert any(str(foreign) in line and line.endswith("; fix: remove it (no row of instances/ makes it, and the "
                                                      "farm deletes only what its manifests recorded)")
               for line in drift), drift

    build = run_farm(project, "build", SEL)
    assert build.returncode == 0, build.stderr
    assert not temporary.exists() and foreign.read_text() == "mine"
    check = run_farm(project, "check", SEL)
    assert [line for line in check.stdout.splitlines() if line.startswith("DRIFT ")] == [
        f"DRIFT {foreign}: file not recorded in manifest.json; fix: remove it (no row of instances/ makes it, "
        "and the farm deletes only what its manifests recorded)"]
    foreign.unlink()
    assert run_farm(project, "check", SEL).returncode == 0


def test_a_dead_writers_temporary_is_removed_by_a_build_with_nothing_to_compile(built: Path,
                                                                              tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    dead = subprocess.Popen(["true"])
    dead.wait()
    temporary = where(project) / f".manifest.json.{dead.pid}.0123456789abcdef.tmp"
    temporary.write_bytes(b"half a manifest")
    check = run_farm(project, "check", SEL)
    assert check.returncode == 1 and f"DRIFT {temporary}: file not recorded" in check.stdout
    build = run_farm(project, "build", SEL)
    assert build.returncode == 0 and "built 0, failed 0, up to date 6" in build.stderr, build.stderr
    assert f"removed rmsnorm/{TARGET}/{temporary.name}" in build.stderr
    assert not temporary.exists()
    assert run_farm(project, "check", SEL).returncode == 0


def test_a_manifest_not_as_the_farm_writes_it_is_rewritten_by_a_build_with_nothing_to_compile(
        built: Path, tmp_path: Path) -> None:
    """A manifest reformatted by hand and a SOURCE.md gone: check names both with the build that repairs them;
    that build compiles nothing and writes both back byte for byte."""
    project = built_copy(built, tmp_path / "p")
    manifest, provenance = where(project) / "manifest.json", where(project) / "SOURCE.md"
    before = manifest.read_bytes(), provenance.read_bytes()
    manifest.write_text(json.dumps(json.loads(before[0])))
    provenance.unlink()
    check = run_farm(project, "check", SEL)
    assert f"DRIFT {manifest}: edited by hand (not in the form the farm writes){fix_for()}" in check.stdout
    assert f"DRIFT {provenance}: missing or differs from the provenance the manifest implies{fix_for()}" \
           in check.stdout, check.stdout
    build = run_farm(project, "build", SEL)
    assert build.returncode == 0 and "built 0, failed 0, up to date 6" in build.stderr, build.stderr
    assert (manifest.read_bytes(), provenance.read_bytes()) == before
    assert run_farm(project, "check", SEL).returncode == 0

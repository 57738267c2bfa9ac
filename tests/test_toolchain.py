"""The toolchain is identified by content: the pin holds digests of the installed Python distributions'
bytes (FlyDSL's bundled libraries included) and of the linker's bytes, and a file changed in place, with
its version, size and mtime unchanged, is caught and named. Nothing here touches .venv: the edited
distributions are fakes in temporary site directories, found through a search path or PYTHONPATH."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest
import yaml
from conftest import REPO, copy_project, run_farm, small_copy

from farm.core.errors import FarmError
from farm.toolchain import beside
from farm.toolchain.beside import PinCheck
from farm.toolchain.compare import differences, require_pin
from farm.toolchain.distributions import CONTENT_DISTRIBUTIONS, distribution_content
from farm.toolchain.installed import compile_part, installed
from farm.toolchain.pin_file import pin_text

LIB = "flydsl/_mlir/_mlir_libs/libFlyPythonCAPI.so"
FAKE_FILES = {
    "flydsl/__init__.py": b"__version__ = '0.3.4'\n",
    "flydsl/compiler/jit.py": b"def jit(f):\n    return f\n",
    LIB: b"\x7fELF" + bytes(range(256)) * 64,
    "flydsl.libs/libzstd-76b78bac.so.1.4.4": b"\x7fELF" + b"zstd" * 512,
}


def fake_flydsl(site: Path, files: dict[str, bytes] = FAKE_FILES, version: str = "0.3.4") -> Path:
    """A flydsl distribution as pip lays it out: files, and a dist-info whose RECORD lists their hashes."""
    info = site / f"flydsl-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flydsl\nVersion: {version}\n")
    rows = []
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
        b64 = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={b64},{len(data)}")
    rows += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,", "flydsl/__pycache__/__init__.cpython-311.pyc,,",
             "../../../bin/flydsl-tool,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return site


def edit_in_place(path: Path) -> None:
    """Change one byte, keeping size and mtime (as a careless patch or `touch -r` would): only ctime moves."""
    st = path.stat()
    with open(path, "r+b") as f:  # the byte before the last: inside the fake linker's trailing comment
        f.seek(st.st_size - 2)
        byte = f.read(1)
        f.seek(st.st_size - 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def fake_linker(path: Path) -> dict[str, str]:
    path.write_text("#!/bin/sh\necho 'LLD 99.1.0 (compatible with GNU linkers)'\n# padding padding padding\n")
    path.chmod(0o755)
    return {"path": str(path)}


def test_flydsl_edited_in_place_refuses_naming_the_file(tmp_path: Path) -> None:
    site = fake_flydsl(tmp_path / "site")
    cache = tmp_path / "cache"
    cache.mkdir()
    pin = installed(cache, search_path=[str(site)])
    assert pin["content"]["flydsl"]["files"] == len(FAKE_FILES)  # bytecode, metadata and bin/ scripts not counted
    require_pin(pin, installed(cache, search_path=[str(site)]))  # unchanged: agrees, from the cache

    for rel in (LIB, "flydsl.libs/libzstd-76b78bac.so.1.4.4"):  # the bundled libraries are checked too
        edit_in_place(site / rel)
        with pytest.raises(FarmError) as err:
            require_pin(pin, installed(cache, search_path=[str(site)]))
        assert f"flydsl file {rel} differs from the pin (edited in place" in err.value.what
        assert "reinstall flydsl==0.3.4" in err.value.fix and "`farm pin`" in err.value.fix
        assert "flydsl: pinned" not in err.value.what  # the version is the same: the bytes are not
        edit_in_place(site / rel)  # the byte back: agrees again
        require_pin(pin, installed(cache, search_path=[str(site)]))


def test_flydsl_edited_in_place_makes_farm_build_refuse(tmp_path: Path) -> None:
    """End to end: the farm, finding a flydsl on PYTHONPATH (a copy, not .venv's), pins it, then refuses
    to build once one of its libraries is edited in place, naming the file, before anything compiles;
    plan and check, which only read, name the file too (exit 1) instead of saying up to date."""
    project = small_copy(tmp_path / "p")
    site = fake_flydsl(tmp_path / "site")
    env = {"PYTHONPATH": str(site), "TMPDIR": str(tmp_path)}
    run_farm(project, "expand", check=True)
    pinned = run_farm(project, "pin", env=env, check=True)
    assert "content.flydsl.sha256" in pinned.stdout
    assert "TOOLCHAIN" not in run_farm(project, "plan", env=env, check=True).stdout
    edit_in_place(site / LIB)
    plan = run_farm(project, "plan", env=env)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert f"TOOLCHAIN flydsl file {LIB} differs from the pin (edited in place" in plan.stdout
    assert "farm build refuses to compile here" in plan.stdout and "reinstall flydsl==0.3.4" in plan.stdout
    check = run_farm(project, "check", env=env)
    assert check.returncode == 1
    assert f"DRIFT toolchain: flydsl file {LIB} differs from the pin (edited in place" in check.stdout
    proc = run_farm(project, "build", env=env)
    assert proc.returncode == 2, proc.stderr
    assert f"flydsl file {LIB} differs from the pin (edited in place" in proc.stderr
    assert "fix: reinstall flydsl==0.3.4" in proc.stderr
    assert not (project / "outputs" / "rmsnorm").exists()


def test_added_missing_and_unrecorded_files_are_named(tmp_path: Path) -> None:
    site = fake_flydsl(tmp_path / "site")
    pin = installed(None, search_path=[str(site)])
    (site / "flydsl" / "compiler" / "patch.py").write_text("import os\n")
    (site / "flydsl" / "__init__.py").unlink()
    lines = differences(compile_part(pin), compile_part(installed(None, search_path=[str(site)])))
    assert lines == [
        "flydsl file flydsl/__init__.py differs from the pin (missing here)",
        "flydsl file flydsl/compiler/patch.py differs from the pin "
        "(not part of the installed distribution: its RECORD does not list it)",
    ]


def test_record_paths_outside_the_site_are_not_followed(tmp_path: Path) -> None:
    """RECORD is data: an absolute path or one climbing out of site-packages is never hashed or named."""
    site = fake_flydsl(tmp_path / "site")
    secret = tmp_path / "secret"
    secret.write_text("not flydsl")
    record = site / "flydsl-0.3.4.dist-info" / "RECORD"
    record.write_text(record.read_text() + f"{secret},sha256=AAAA,1\nflydsl/../../secret,sha256=AAAA,1\n")
    content = distribution_content("flydsl", None, [str(site)])
    assert content.files == len(FAKE_FILES) and not content.edited and not content.added


def test_a_distribution_without_record_is_not_verified(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "flydsl-0.3.3.dist-info").mkdir(parents=True)
    (site / "flydsl-0.3.3.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: flydsl\nVersion: 0.3.3\n")
    pin = {"content": {"flydsl": {"version": "0.3.4", "files": 143, "sha256": "a" * 64}}}
    lines = differences(pin, {"content": {"flydsl": distribution_content("flydsl", None, [str(site)]).as_pin()}})
    assert "content.flydsl.sha256: pinned 'aaaa" in lines[1] and "unverifiable" in lines[1], lines
    assert lines[2] == "content.flydsl.version: pinned '0.3.4', found '0.3.3'"


def test_linker_changed_in_place_is_caught(tmp_path: Path) -> None:
    linker = fake_linker(tmp_path / "ld.lld")
    cache = tmp_path / "cache"
    cache.mkdir()
    site = [str(fake_flydsl(tmp_path / "site"))]
    pin = installed(cache, linker, search_path=site)
    assert pin["linker"]["version"] == "LLD 99.1.0"
    assert pin["linker"]["sha256"] == hashlib.sha256((tmp_path / "ld.lld").read_bytes()).hexdigest()
    edit_in_place(tmp_path / "ld.lld")  # same size and mtime: the identity cache must not hide it
    found = installed(cache, linker, search_path=site)
    assert found["linker"]["sha256"] == hashlib.sha256((tmp_path / "ld.lld").read_bytes()).hexdigest()
    assert differences(compile_part(pin), compile_part(found)) == [
        f"linker.sha256: pinned {pin['linker']['sha256']!r}, found {found['linker']['sha256']!r}"]
    with pytest.raises(FarmError, match="linker.sha256: pinned"):
        require_pin(pin, found)


def test_pin_records_content_digests(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "p")
    path = project / "conf" / "toolchain" / "pinned.yaml"
    old = yaml.safe_load(path.read_text())
    old["content"]["flydsl"]["sha256"] = "0" * 64  # a pin that must move
    path.write_text(pin_text(old))
    moved = run_farm(project, "pin", env={"TMPDIR": str(tmp_path)}, check=True)
    assert f"content.flydsl.sha256: pinned '{'0' * 64}'" in moved.stdout
    text = path.read_text()
    pin = yaml.safe_load(text)
    assert sorted(pin["content"]) == sorted(CONTENT_DISTRIBUTIONS)
    for name in CONTENT_DISTRIBUTIONS:  # computed from the bytes, without any cache, it agrees
        assert pin["content"][name] == distribution_content(name).as_pin()
        assert len(pin["content"][name]["sha256"]) == 64 and pin["content"][name]["files"] > 100
    assert "edited" not in pin["content"]["flydsl"] and "added" not in pin["content"]["flydsl"]
    assert pin_text(pin) == text  # deterministic: the same pin always gives the same text
    assert text == (REPO / "conf" / "toolchain" / "pinned.yaml").read_text()  # the committed pin is this machine's
    assert run_farm(project, "pin", check=True).stdout.startswith("the pin already matches")
    assert "content" in compile_part(pin)  # workers check it too


def test_a_fifo_in_the_distribution_is_named_not_read(tmp_path: Path) -> None:
    """A FIFO planted among flydsl's files would block a plain open(): it is named, never read."""
    site = fake_flydsl(tmp_path / "site")
    os.mkfifo(site / "flydsl" / "compiler" / "pipe.py")
    content = distribution_content("flydsl", None, [str(site)])
    assert content.added == {"flydsl/compiler/pipe.py": "unreadable (not a regular file)"}
    assert content.files == len(FAKE_FILES)


def _refuse() -> None:
    raise FarmError("linker.version: pinned 'LLD 19.1.7', found 'LLD 22.1.8'", "run `farm pin`")


def _crash() -> None:
    raise ZeroDivisionError("division by zero")


def _vanish() -> None:
    os._exit(3)


@pytest.mark.parametrize("way", ["child", "inline"])
def test_the_check_beside_the_build_answers_like_the_check_itself(way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build's toolchain check runs in a forked child (farm/toolchain/beside.py), or inline when the
    caller has other threads (forking beside them is not safe): either way a passing check lets `wait`
    return, a failing one raises its FarmError on every `wait`, and a check that crashes is a failed check,
    named, never a pass; a child that vanishes without answering is named too."""
    monkeypatch.setattr(beside.threading, "active_count", lambda: 1 if way == "child" else 2)
    PinCheck(lambda: None).wait()
    refused = PinCheck(_refuse)
    for _ in range(2):
        with pytest.raises(FarmError) as err:
            refused.wait()
        assert err.value.what == "linker.version: pinned 'LLD 19.1.7', found 'LLD 22.1.8'"
        assert err.value.fix == "run `farm pin`"
    with pytest.raises(FarmError, match="the toolchain check failed: ZeroDivisionError: division by zero"):
        PinCheck(_crash).wait()
    if way == "child":
        with pytest.raises(FarmError, match=r"the toolchain check ended without an answer \(exit code 3\)"):
            PinCheck(_vanish).wait()

"""The composed config kept between commands (farm/table/config_cache.py): used only when every input is the
same, composed again after any change, never trusted beyond its shape, never kept for an interpolation or
an error, and a command on a kept config does not load Hydra or OmegaConf."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO, edit

from farm.core.errors import FarmError
from farm.table import config as config_mod
from farm.table import config_cache

SELECTION = ["ops=[rmsnorm]", "targets=[gfx942]"]


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project holding only conf/, with a private directory (and so a config cache) of its own."""
    shutil.copytree(REPO / "conf", tmp_path / "project" / "conf")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path / "project"


@pytest.fixture()
def composes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The overrides of every real compose (Hydra) from here on."""
    calls: list[list[str]] = []
    real = config_mod._compose

    def counting(root: Path, overrides: list[str]):  # noqa: ANN202  (Hydra's DictConfig and choices)
        calls.append(list(overrides))
        return real(root, overrides)

    monkeypatch.setattr(config_mod, "_compose", counting)
    return calls


def entries() -> list[Path]:
    folder = Path(tempfile.gettempdir()) / f"farm-{os.getuid()}" / "config-cache"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def test_a_second_load_uses_the_kept_config_and_gives_the_same_config(project: Path, composes: list) -> None:
    first = config_mod.load(project, SELECTION)
    assert len(composes) == 1 and len(entries()) == 1
    second = config_mod.load(project, SELECTION)
    assert len(composes) == 1, "the second load composed again"
    assert second == first
    assert second.ops["rmsnorm"].groups and second.targets["gfx942"].wave_size == 64


@pytest.mark.parametrize(("file", "old", "new", "seen"), [
    ("target/gfx942.yaml", "lds_bytes: 65536", "lds_bytes: 32768",
     lambda cfg: cfg.targets["gfx942"].lds_bytes == 32768),
    ("op/rmsnorm.yaml", "spec: ", "spec: changed-",
     lambda cfg: cfg.ops["rmsnorm"].spec.startswith("changed-")),
    ("executor/local.yaml", "max_retries: 2", "max_retries: 5",
     lambda cfg: cfg.executor["max_retries"] == 5),
    ("config.yaml", "compile_timeout_s: 900", "compile_timeout_s: 901",
     lambda cfg: cfg.compile_timeout_s == 901),
])
def test_a_changed_conf_file_is_composed_again(project: Path, composes: list, file: str, old: str, new: str,
                                                seen) -> None:  # noqa: ANN001  (a check of the new config)
    before = config_mod.load(project, SELECTION)
    assert not seen(before)
    edit(project / "conf" / file, old, new)
    after = config_mod.load(project, SELECTION)
    assert len(composes) == 2 and seen(after)


def test_a_new_op_file_and_other_overrides_are_composed_again(project: Path, composes: list) -> None:
    config_mod.load(project, SELECTION)
    text = (project / "conf/op/rmsnorm.yaml").read_text().replace("name: rmsnorm\n", "name: rmsnorm_copy\n", 1)
    (project / "conf/op/rmsnorm_copy.yaml").write_text(text)
    assert "rmsnorm_copy" in config_mod.load(project, SELECTION).ops
    assert config_mod.load(project, ["ops=[rmsnorm]"]).selected_targets != ("gfx942",)
    assert len(composes) == 3


def test_the_farm_s_table_code_and_the_libraries_are_part_of_the_key(project: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "schema.py").write_text("A = 1\n")
    monkeypatch.setattr(config_cache, "FARM_CODE", (code,))
    key = config_cache.key_for(project, SELECTION)
    assert config_cache.key_for(project, SELECTION) == key
    (code / "schema.py").write_text("A = 2\n")
    assert config_cache.key_for(project, SELECTION) != key
    changed = config_cache.key_for(project, SELECTION)
    fake = tmp_path / "lib" / "fakelib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(fake.parent))
    monkeypatch.setattr(config_cache, "LIBRARIES", (*config_cache.LIBRARIES, "fakelib"))
    with_lib = config_cache.key_for(project, SELECTION)
    assert with_lib != changed
    os.utime(fake / "__init__.py", ns=(1, 1))  # reinstalled or upgraded: its stamp changes
    assert config_cache.key_for(project, SELECTION) != with_lib


@pytest.mark.parametrize("tamper", ["not json", "list", "other key", "wrong shape", "symlink", "unknown key"])
def test_a_kept_entry_not_as_written_is_not_used(project: Path, composes: list, tmp_path: Path,
                                                 tamper: str) -> None:
    first = config_mod.load(project, SELECTION)
    [entry] = entries()
    data = json.loads(entry.read_text())
    if tamper == "not json":
        entry.write_text("{truncated")
    elif tamper == "list":
        entry.write_text("[]")
    elif tamper == "other key":
        entry.write_text(json.dumps(dict(data, key="0" * 64)))
    elif tamper == "wrong shape":
        entry.write_text(json.dumps(dict(data, files={"conf/op/rmsnorm.yaml": ["not", "a", "mapping"]})))
    elif tamper == "symlink":
        planted = tmp_path / "planted.json"
        planted.write_text(json.dumps(data))
        entry.unlink()
        entry.symlink_to(planted)
    else:
        entry.write_text(json.dumps(dict(data, top=dict(data["top"], surprise=1))))
    assert config_mod.load(project, SELECTION) == first
    assert len(composes) == 2, "the entry was used"


def test_a_kept_entry_still_goes_through_the_checks(project: Path, composes: list) -> None:
    config_mod.load(project, SELECTION)
    [entry] = entries()
    data = json.loads(entry.read_text())
    data["files"]["conf/target/gfx942.yaml"]["wave_size"] = 48
    entry.write_text(json.dumps(data))
    with pytest.raises(FarmError, match="wave_size 48 is not 32 or 64"):
        config_mod.load(project, SELECTION)
    assert len(composes) == 1


def test_an_interpolation_is_never_kept(project: Path, composes: list, monkeypatch: pytest.MonkeyPatch) -> None:
    edit(project / "conf/config.yaml", "report_dir: .farm/reports",
         "report_dir: ${oc.env:FARM_TEST_REPORTS,.farm/reports}")
    monkeypatch.setenv("FARM_TEST_REPORTS", "reports-a")
    assert config_mod.load(project, SELECTION).report_dir == project / "reports-a"
    monkeypatch.setenv("FARM_TEST_REPORTS", "reports-b")
    assert config_mod.load(project, SELECTION).report_dir == project / "reports-b"
    assert entries() == [] and len(composes) == 2


def test_a_hydra_search_path_is_never_kept(project: Path, composes: list) -> None:
    (project / "more-conf").mkdir()
    config_mod.load(project, [*SELECTION, f"hydra.searchpath=[file://{project / 'more-conf'}]"])
    edit(project / "conf/config.yaml", "report_keep: 20", "report_keep: 20\nhydra:\n  searchpath: []")
    config_mod.load(project, SELECTION)
    config_mod.load(project, SELECTION)
    assert entries() == [] and len(composes) == 3


def test_a_failed_compose_is_not_kept_and_a_failed_check_fails_again(project: Path, composes: list) -> None:
    for _ in range(2):
        with pytest.raises(FarmError, match="unknown option 'tragets'"):
            config_mod.load(project, ["tragets=[gfx942]"])
    assert len(composes) == 2 and entries() == []
    # Composed fine, but a table's check fails: the kept data fails the same check the next time.
    edit(project / "conf/target/gfx942.yaml", "wave_size: 64", "wave_sise: 64")
    for _ in range(2):
        with pytest.raises(FarmError, match="unknown key 'wave_sise'"):
            config_mod.load(project, SELECTION)
    assert len(composes) == 3
    edit(project / "conf/target/gfx942.yaml", "wave_sise: 64", "wave_size: 64")
    assert config_mod.load(project, SELECTION).targets["gfx942"].wave_size == 64


def test_a_planted_cache_directory_is_neither_used_nor_written_through(project: Path, tmp_path: Path,
                                                                       composes: list) -> None:
    mine = Path(tempfile.gettempdir()) / f"farm-{os.getuid()}"
    mine.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (mine / "config-cache").symlink_to(elsewhere)
    first = config_mod.load(project, SELECTION)
    assert config_mod.load(project, SELECTION) == first
    assert len(composes) == 2 and list(elsewhere.iterdir()) == []


def test_only_the_newest_entries_are_kept(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_cache, "KEEP", 3)
    folder = config_cache.private_dir("config-cache")
    (folder / "notes.txt").write_text("not an entry")
    for timeout in range(1, 6):
        config_mod.load(project, [*SELECTION, f"compile_timeout_s={timeout}"])
        for i, path in enumerate(sorted(entries(), key=lambda p: p.stat().st_mtime_ns)):
            os.utime(path, ns=(i, i))  # a strict order, whatever the clock's resolution
    kept = entries()
    assert len(kept) == 3 and (folder / "notes.txt").is_file()
    newest = config_cache.key_for(project, [*SELECTION, "compile_timeout_s=5"])
    assert folder / f"{newest}.json" in kept


def test_a_command_on_a_kept_config_loads_neither_hydra_nor_omegaconf(project: Path) -> None:
    script = ("import sys; from pathlib import Path; from farm.table import config as c; "
              f"cfg = c.load(Path({str(project)!r}), {SELECTION!r}); "
              "print(sorted(cfg.ops), 'hydra' in sys.modules, 'omegaconf' in sys.modules)")
    env = dict(os.environ, TMPDIR=tempfile.gettempdir(), PYTHONPATH=str(REPO))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
            for _ in range(2)]
    ops = sorted(p.name[:-5] for p in (project / "conf/op").glob("*.yaml"))
    assert runs[0].stdout.split("]")[1].split() == ["True", "True"], runs[0].stdout
    assert runs[1].stdout.strip() == f"{ops} False False", runs[1].stdout + runs[1].stderr

"""The config's schema: a misspelled key anywhere is one error naming the key, where it is and the nearest
accepted one; ops and targets are the files under conf/op/ and conf/target/; a group may declare its own
kernel symbols."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO, edit, run_farm, small_copy

from farm.core.errors import FarmError
from farm.table import config as config_mod
from farm.table.rows import Row
from farm.verify.accept import rules_of
from farm.verify.rules import Rules, problems


@pytest.fixture()
def conf_only(tmp_path: Path) -> Path:
    """A project holding only conf/ (loading the config reads nothing else)."""
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    return tmp_path


def load_error(project: Path, *overrides: str) -> str:
    with pytest.raises(FarmError) as caught:
        config_mod.load(project, list(overrides))
    assert caught.value.fix, str(caught.value)  # every refusal says how to fix it
    return str(caught.value)


# --------------------------------------------------------------------------------------------------
# Unknown keys, wherever they are.


@pytest.mark.parametrize(("file", "old", "new", "says"), [
    ("target/gfx942.yaml", "wave_size: 64", "wave_sise: 64",
     "conf/target/gfx942.yaml: unknown key 'wave_sise' (did you mean 'wave_size'?)"),
    ("op/rmsnorm.yaml", "\nspec:", "\nspek: x\nspec:",
     "conf/op/rmsnorm.yaml: unknown key 'spek' (did you mean 'spec'?)"),
    ("op/rmsnorm.yaml", "  - name: generic\n", "  - name: generic\n    tagets: [gfx942]\n",
     "conf/op/rmsnorm.yaml groups[1]: unknown key 'tagets' (did you mean 'targets'?)"),
    ("op/rmsnorm.yaml", "  - name: baked\n", "  - name: baked\n    allow: {scrach: true}\n",
     "conf/op/rmsnorm.yaml groups[0].allow: unknown key 'scrach' (did you mean 'scratch'?)"),
    ("op/rmsnorm.yaml", "  vgpr_spill: false\n", "  vgpr_spil: false\n",
     "conf/op/rmsnorm.yaml allow: unknown key 'vgpr_spil' (did you mean 'vgpr_spill'?)"),
    ("executor/local.yaml", "warm: true", "wram: true",
     "conf/executor/local.yaml: unknown key 'executor.wram'; did you mean 'executor.warm'?"),
    ("toolchain/pinned.yaml", "\nlinker:", "\nlinkr: {}\nlinker:",
     "conf/toolchain/pinned.yaml: unknown key 'toolchain.linkr'; did you mean 'toolchain.linker'?"),
    ("config.yaml", "report_keep: 20", "report_kept: 20",
     "conf/config.yaml: unknown key 'report_kept'; did you mean 'report_keep'?"),
    ("config.yaml", "    umask: true", "    umsak: true",
     "conf/config.yaml: unknown key 'audit.vary.umsak'; did you mean 'audit.vary.umask'?"),
])
def test_an_unknown_key_in_a_file_names_the_file_and_the_nearest_key(conf_only: Path, file: str, old: str,
                                                                      new: str, says: str) -> None:
    assert config_mod.load(conf_only, [])  # the copy loads before the edit
    edit(conf_only / "conf" / file, old, new)
    assert says in load_error(conf_only)


def test_a_tuning_entry_takes_only_its_keys(conf_only: Path) -> None:
    op = conf_only / "conf" / "op" / "rmsnorm.yaml"
    op.write_text(op.read_text() + "tuning:\n  - match: {dtype: bf16}\n    sett: {block: 256}\n")
    assert "conf/op/rmsnorm.yaml tuning[0]: unknown key 'sett' (did you mean 'set'?)" in load_error(conf_only)


@pytest.mark.parametrize(("override", "says"), [
    ("executor.wram=false", "unknown option 'executor.wram' in overrides; did you mean 'executor.warm'?"),
    ("remote.urll=x", "unknown option 'remote.urll' in overrides; did you mean 'remote.url'?"),
    ("toolchain.linker.pth=/x", "unknown option 'toolchain.linker.pth' in overrides; did you mean "
                                "'toolchain.linker.path'?"),
    ("+outputs=/tmp/x", "unknown option 'outputs' in overrides; did you mean 'outputs_dir'?"),
    ("op_table.rmsnorm.targets=[gfx942]", "unknown option 'op_table' in overrides"),
    ("executor=clutser", "config error in executor=clutser"),
    ("remote=ftp", "remote takes the name of a file under conf/remote/; accepted: local, s3"),
])
def test_an_unknown_override_is_named_before_composing(conf_only: Path, override: str, says: str) -> None:
    assert says in load_error(conf_only, override)


def test_declared_keys_of_other_group_files_are_accepted(conf_only: Path) -> None:
    cfg = config_mod.load(conf_only, ["remote=s3", "remote.url=s3://b/p", "remote.region=eu-1",
                                      "executor=cluster", "executor.address=127.0.0.1:1", "audit.vary.umask=false"])
    assert cfg.extra["remote"]["region"] == "eu-1" and cfg.executor["address"] == "127.0.0.1:1"
    assert cfg.extra["audit"]["vary"]["umask"] is False


# --------------------------------------------------------------------------------------------------
# Ops and targets are the files in their folders.


def test_ops_and_targets_are_the_files_in_their_folders(conf_only: Path) -> None:
    assert "op@" not in (conf_only / "conf" / "config.yaml").read_text()  # nothing lists them
    cfg = config_mod.load(conf_only, [])
    assert sorted(cfg.ops) == sorted(p.stem for p in (REPO / "conf" / "op").glob("*.yaml"))
    assert sorted(cfg.targets) == sorted(p.stem for p in (REPO / "conf" / "target").glob("*.yaml"))
    (conf_only / "conf" / "target" / "gfx942.yaml").unlink()
    assert "conf/op/rmsnorm.yaml: unknown target 'gfx942'" in load_error(conf_only)


def test_a_selected_op_without_a_file_points_at_the_file(conf_only: Path) -> None:
    message = load_error(conf_only, "ops=[layernorm]")
    assert "unknown op 'layernorm'; accepted: rmsnorm" in message
    assert "conf/op/layernorm.yaml" in message


@pytest.mark.parametrize("name", ["Bad.yaml", "has space.yaml", "-lead.yaml"])
def test_a_file_name_that_cannot_be_an_op_name_is_refused(conf_only: Path, name: str) -> None:
    shutil.copy(conf_only / "conf" / "op" / "rmsnorm.yaml", conf_only / "conf" / "op" / name)
    assert f"conf/op/{name}: {name[:-5]!r} is not a usable op name" in load_error(conf_only)


def test_an_old_config_listing_op_files_is_told_to_drop_the_lines(conf_only: Path) -> None:
    edit(conf_only / "conf" / "config.yaml", "  - _self_", "  - op@op_table.rmsnorm: rmsnorm\n  - _self_")
    assert "lists op or target files in its defaults" in load_error(conf_only)


def test_a_dropped_in_op_file_is_a_new_op(tmp_path: Path) -> None:
    """conf/op/<name>.yaml reusing an existing kernel family: expand and plan see it, nothing else edited."""
    project = small_copy(tmp_path / "p")
    twin = (project / "conf" / "op" / "rmsnorm.yaml").read_text().replace("name: rmsnorm\n", "name: rmsnorm_twin\n")
    twin = twin.replace("'rmsnorm_{dtype}", "'twin_{dtype}")
    (project / "conf" / "op" / "rmsnorm_twin.yaml").write_text(twin)
    # small_copy selects only rmsnorm by default; the new op is selected by name, like any other.
    assert run_farm(project, "expand", "ops=[rmsnorm_twin]", check=True).returncode == 0
    rows = [json.loads(line) for line in (project / "instances" / "rmsnorm_twin.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and {r["op"] for r in rows} == {"rmsnorm_twin"}
    assert all(r["name"].startswith("twin_") for r in rows)
    plan = run_farm(project, "plan", "ops=[rmsnorm_twin]", "targets=[gfx942]", check=True)
    assert plan.stdout.strip().splitlines()[-1] == "rows=6 up_to_date=0 to_build=6"


# --------------------------------------------------------------------------------------------------
# One op, different kernel symbols per group.


def code_object(kernels: list[str]) -> SimpleNamespace:
    """The facts verify.problems reads of an object, for a gfx942 object holding `kernels`."""
    return SimpleNamespace(e_machine=224, os_abi=64, amdhsa_target="amdgcn-amd-amdhsa--gfx942", mach=0x04c,
                           generic_version=0, abi_version=4, kernel_symbols=sorted(kernels),
                           kernels=[{".name": k, ".wavefront_size": 64} for k in kernels],
                           comment="Linker: LLD 22.1.8")


def test_a_group_may_declare_its_own_symbols(conf_only: Path) -> None:
    before = config_mod.load(conf_only, []).ops["rmsnorm"]
    edit(conf_only / "conf" / "op" / "rmsnorm.yaml", "  - name: generic\n",
         "  - name: generic\n    symbols: [rmsnorm_generic_0]\n")
    cfg = config_mod.load(conf_only, [])
    op = cfg.ops["rmsnorm"]

    def rules(group: str) -> Rules:
        return rules_of(cfg, Row(op="rmsnorm", target="gfx942", name="x", group=group, knobs={}, allow={}))

    assert rules("baked").symbols == ("rmsnorm_fwd_0",) and rules("generic").symbols == ("rmsnorm_generic_0",)
    # The op's identity (in every input digest) changes with a group's symbols, and only then.
    assert before.compile_identity() == {k: v for k, v in op.compile_identity().items() if k != "group_symbols"}
    assert op.compile_identity()["group_symbols"] == {"generic": ["rmsnorm_generic_0"]}

    def kernel_problems(group: str, kernels: list[str]) -> list[str]:
        return [p for p in problems(code_object(kernels), rules(group), {}) if p.startswith("kernels are")]

    assert kernel_problems("generic", ["rmsnorm_generic_0"]) == []
    assert kernel_problems("baked", ["rmsnorm_fwd_0"]) == []
    assert kernel_problems("generic", ["rmsnorm_fwd_0"]) == [
        "kernels are ['rmsnorm_fwd_0'] (symbols ['rmsnorm_fwd_0']), op rmsnorm declares ['rmsnorm_generic_0']"]


def test_group_symbols_must_be_kernel_names(conf_only: Path) -> None:
    edit(conf_only / "conf" / "op" / "rmsnorm.yaml", "  - name: generic\n", "  - name: generic\n    symbols: []\n")
    assert "conf/op/rmsnorm.yaml groups[1]: symbols must be a non-empty list of kernel names" in load_error(conf_only)


def test_group_names_are_unique_within_an_op(conf_only: Path) -> None:
    edit(conf_only / "conf" / "op" / "rmsnorm.yaml", "  - name: generic\n", "  - name: baked\n")
    assert "conf/op/rmsnorm.yaml: group name(s) ['baked'] used more than once" in load_error(conf_only)

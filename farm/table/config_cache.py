"""The composed config, kept between commands so that most commands need neither Hydra nor OmegaConf.

Composing conf/ with Hydra and reading the op and target files with OmegaConf's YAML loader cost every
command ~0.35 s, imports included (more than planning 1,453 rows). Both are functions of their inputs
only: the files under conf/, the overrides, the farm's own table code, and the installed Hydra, OmegaConf,
PyYAML and ANTLR. So their result, as plain data, is kept in the user's private directory under a digest
of all of those (`key_for`) and used again only when every one of those bytes is the same.

What is read back is data, never trusted for more than its shape: an entry that is not exactly the shape
written (`lookup`) is ignored and the config is composed again, and a used entry goes through the same
checks as a fresh compose (farm/table/config.py `load`). A config with an interpolation (`${...}`) or a
Hydra search path (`searchpath`) in any conf/ file or override is never kept: its value can depend on
more than the files under conf/ (an environment variable, the clock, another config folder). Errors are
never kept: a compose that fails raises before anything is written.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.core.canonical import sha256_bytes
from farm.core.errors import FarmError
from farm.core.private import private_dir, read_private_text, write_private_text

FORMAT = "farm composed config 1"
KEEP = 64  # entries kept (each a few kB); older ones go when a new one is written
# An interpolation can read the environment or the clock; a search path adds config folders outside conf/.
BEYOND_CONF = ("${", "searchpath")
# The libraries whose code decides the composed data: Hydra composes, OmegaConf and PyYAML read YAML,
# ANTLR parses the overrides; `hydra_plugins` would add config sources to Hydra's search path.
LIBRARIES = ("hydra", "omegaconf", "yaml", "antlr4", "hydra_plugins")
# This folder's code decides how the config is composed, checked and read; shapes.py is part of the schema.
FARM_CODE = (Path(__file__).parent, Path(__file__).parent.parent / "toolchain" / "shapes.py")
_ENTRY = re.compile(r"[0-9a-f]{64}\.json")


@dataclass(frozen=True)
class Composed:
    """What Hydra and OmegaConf give `load`, as plain data."""

    top: dict[str, Any]  # conf/config.yaml with its groups and the overrides, composed and resolved
    choices: dict[str, str]  # the file chosen for each config group (named in error messages)
    files: dict[str, dict[str, Any]]  # "conf/target/gfx942.yaml" -> that op or target file's data


def key_for(root: Path, overrides: list[str]) -> str | None:
    """The digest of everything the composed config depends on; None when it may depend on more."""
    if any(word in text for text in overrides for word in BEYOND_CONF):
        return None
    digest = hashlib.sha256()

    def feed(*parts: object) -> None:
        digest.update(json.dumps([str(p) for p in parts]).encode() + b"\n")

    feed(FORMAT, sys.version, root, json.dumps(overrides))
    conf = root / "conf"
    for path in files_under(conf):
        data = path.read_bytes()
        if any(word.encode() in data for word in BEYOND_CONF):
            return None
        feed("conf", path.relative_to(conf), sha256_bytes(data))
    for code in FARM_CODE:
        for path in sorted(code.glob("*.py")) if code.is_dir() else [code]:
            feed("code", path.name, sha256_bytes(path.read_bytes()))
    for name in LIBRARIES:
        feed("library", name, *_installed(name))
    return digest.hexdigest()


def files_under(folder: Path) -> list[Path]:
    """Every file below `folder`, in a fixed order; symlinked folders are not entered (no loops)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        found += [Path(dirpath) / name for name in sorted(filenames)]
    return found


def _installed(module: str) -> tuple[str, ...]:
    """Where `module` would be imported from and that file's stamp: an upgrade or reinstall changes it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return ("absent",)
    places = [spec.origin] if spec.origin else list(spec.submodule_search_locations or [])
    stamps: list[str] = []
    for place in places:
        try:
            st = os.stat(place)
            stamps.append(f"{place} {st.st_mtime_ns} {st.st_size}")
        except OSError:
            stamps.append(f"{place} missing")
    return tuple(stamps) or ("no origin",)


def _entry(key: str) -> Path | None:
    """The entry's path; None when the private directory is not this user's own (a planted symlink, another
    owner): the cache is then not used at all, and the commands that need that directory say why."""
    if not _ENTRY.fullmatch(f"{key}.json"):
        raise ValueError(f"not a config cache key: {key!r}")
    try:
        return private_dir("config-cache") / f"{key}.json"
    except FarmError:
        return None


def lookup(key: str) -> Composed | None:
    """The kept config for `key`; None when there is none or the entry is not exactly what `keep` writes."""
    path = _entry(key)
    text = read_private_text(path) if path is not None else None
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    top, choices, files = data.get("top"), data.get("choices"), data.get("files")
    if not (_str_keyed(top) and _str_keyed(choices) and all(isinstance(v, str) for v in choices.values())
            and _str_keyed(files) and all(_str_keyed(v) for v in files.values())):
        return None
    return Composed(top=top, choices=choices, files=files)


def _str_keyed(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _encoded(key: str, composed: Composed) -> str | None:
    """The entry's text; None when JSON cannot hold the data exactly (a non-string key, NaN): not kept."""
    data = {"format": FORMAT, "key": key, "top": composed.top, "choices": composed.choices,
            "files": composed.files}
    try:
        text = json.dumps(data, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return text if json.loads(text) == data else None


def keep(key: str, composed: Composed) -> None:
    """Write the entry (atomically: a reader sees the old one or the new one) and drop the oldest beyond KEEP.
    Called before `load` checks the data, so what is kept is what Hydra and OmegaConf gave. The cache only
    saves time: failing to write it is not an error."""
    text = _encoded(key, composed)
    path = _entry(key) if text is not None else None
    if path is None:
        return
    try:
        write_private_text(path, text)
        _prune(path.parent)
    except OSError:
        pass


def _prune(folder: Path) -> None:
    entries: list[tuple[int, str]] = []
    with os.scandir(folder) as found:
        for item in found:
            if _ENTRY.fullmatch(item.name):
                st = item.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    entries.append((st.st_mtime_ns, item.name))
    for _, name in sorted(entries, reverse=True)[KEEP:]:
        try:
            os.unlink(folder / name)  # a name matched above, inside the farm's private directory
        except FileNotFoundError:
            pass  # another command pruned it first

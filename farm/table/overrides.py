"""Command-line overrides, checked against the schema before Hydra composes anything: a misspelled key or
a config group given a name that has no file is one error naming it (and the nearest accepted key)."""

from __future__ import annotations

import re
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException

from farm.core.errors import FarmError
from farm.table.quoting import SHOWN, shortened, shown
from farm.table.schema import CONFIG_GROUPS, ConfigFile, child_schema, fields_of
from farm.table.values import nearest, nearest_hint

LONG_QUOTE = re.compile(rf"'[^'\n]{{{SHOWN + 1},}}'")  # a long part of a value, quoted by Hydra's parser
EXAMPLE = "e.g. targets=[gfx942] ops=[rmsnorm] outputs_dir=/tmp/out"


def check_overrides(root: Path, overrides: list[str]) -> list[Override]:
    """The parsed overrides, once every key is one the schema declares."""
    for text in overrides:
        key, eq, _ = text.partition("=")
        if not eq or not key.lstrip("+~").strip():
            raise FarmError(f"malformed override {shown(text)}: overrides look like key=value, with a key", EXAMPLE)
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:  # one at a time: the error names the one that is malformed
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as exc:
            raise FarmError(f"malformed override {shown(text)}: {_problem(exc, text)}",
                            "overrides look like key=value, lists like targets=[gfx942,gfx950]") from None
    for override in parsed:
        _check(root, override)
    return parsed


def _problem(exc: OverrideParseException, text: str) -> str:
    """What Hydra's parser says is wrong, without its link, its caret line or the override again in full."""
    lines = [line.strip() for line in str(exc.message or exc).splitlines()]
    kept = [line for line in lines if line and not line.startswith(("See https://", "Error parsing override"))
            and set(line) != {"^"}]
    said = "; ".join(kept).replace(text, "the override") if len(text) > SHOWN else "; ".join(kept)
    said = LONG_QUOTE.sub("(part of the override)", said)  # quoted once, above
    return shortened(said, 200) or "not in Hydra's override grammar"


def _check(root: Path, override: Override) -> None:
    key = override.key_or_group
    if key == "hydra" or key.startswith("hydra."):
        return  # Hydra's own settings: Hydra checks them
    if override.package is not None:
        raise FarmError(f"unknown option '{shortened(override.input_line)}' in overrides: the farm takes no package "
                        "overrides (group@package)",
                        f"ops and targets are the files under conf/op/ and conf/target/; {EXAMPLE}")
    if key in CONFIG_GROUPS:
        if not override.is_delete():
            _check_choice(root, key, override)
        return
    _check_key(key)


def _check_choice(root: Path, group: str, override: Override) -> None:
    """`executor=cluster`: the value names a file under conf/<group>/."""
    choices = sorted(p.name[: -len(".yaml")] for p in (root / "conf" / group).glob("*.yaml"))
    value = override.value()
    if isinstance(value, str) and value in choices:
        return
    raise FarmError(f"config error in {shortened(override.input_line)}: {group} takes the name of a file under "
                    f"conf/{group}/; accepted: {', '.join(choices)}",
                    f"a config group takes the name of a file under conf/<group>/, e.g. {group}="
                    f"{choices[0] if choices else 'NAME'}")


def _check_key(key: str) -> None:
    """Each dotted part of `key` must be declared under the part before it."""
    schema: object = ConfigFile
    parts = key.split(".")
    for depth, part in enumerate(parts):
        known, sub = child_schema(schema, part)
        if not known:
            parent = ".".join(parts[:depth])
            accepted = sorted(fields_of(schema) or ())
            hint = nearest_hint(nearest(part, accepted), f"; did you mean '{parent + '.' if parent else ''}{{}}'?")
            raise FarmError(f"unknown option '{shortened('.'.join(parts[:depth + 1]))}' in overrides{hint}\n"
                            f"  accepted{' under ' + parent if parent else ''}: {', '.join(accepted)}",
                            f"fix the key's spelling; {EXAMPLE}")
        schema = sub


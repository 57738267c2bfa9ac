"""The `farm vendor` sub-verbs' options: plain key=value words, checked against each sub-verb's keys."""

from __future__ import annotations

import difflib

from farm.core.errors import FarmError

TRUE = ("true", "yes", "1", "on")
FALSE = ("false", "no", "0", "off")


def parse(sub: str, words: list[str], accepted: tuple[str, ...], usage: str) -> dict[str, str]:
    """key=value words -> dict; an unknown or repeated key, or a word without `=`, is one clear error."""
    out: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise FarmError(f"{sub}: {word!r} is not key=value; {usage}",
                            f"write each option as key=value (keys: {', '.join(accepted)})")
        if key not in accepted:
            near = difflib.get_close_matches(key, accepted, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise FarmError(f"{sub}: unknown key {key!r}{hint} (accepted: {', '.join(accepted)})",
                            usage)
        if key in out:
            raise FarmError(f"{sub}: {key}= given twice", "give each key once")
        out[key] = value
    return out


def as_list(key: str, value: str) -> list[str]:
    """`[a,b]` or `a` -> ['a', 'b'] / ['a'] (the farm's override list style)."""
    text = value.strip()
    if text.startswith("[") != text.endswith("]"):
        raise FarmError(f"{key}={value}: unbalanced brackets", f"e.g. {key}=[a.py,b.py]")
    if text.startswith("["):
        text = text[1:-1]
    items = [part.strip().strip("'\"") for part in text.split(",")]
    items = [item for item in items if item]
    if not items:
        raise FarmError(f"{key}= names nothing", f"e.g. {key}=[a.py,b.py]")
    return items


def as_bool(key: str, value: str | None, default: bool = False) -> bool:
    if value is None:
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise FarmError(f"{key}={value}: not a boolean", f"write {key}=true or {key}=false")


def require(sub: str, opts: dict[str, str], keys: tuple[str, ...], usage: str) -> None:
    missing = [k for k in keys if not opts.get(k)]
    if missing:
        raise FarmError(f"{sub}: missing {', '.join(k + '=' for k in missing)}; {usage}",
                        f"give {' and '.join(k + '=...' for k in missing)}")

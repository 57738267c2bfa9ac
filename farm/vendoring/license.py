"""Which license each vendored file is under, and the license text that goes with it.

A file's license is its own `SPDX-License-Identifier:` line; without one, the license file that covers its
path in the upstream checkout: the nearest LICENSE*/COPYING* in its directory or a parent directory. So
one upstream can mix licenses, and each file keeps its own (never its upstream's latest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from farm.core.errors import FarmError
from farm.vendoring.gitsrc import Checkout, clean_path

SPDX = re.compile(r"SPDX-License-Identifier:[ \t]*(\S.*?)[ \t]*(?:\*/|-->)?[ \t]*$", re.MULTILINE)
LICENSE_NAMES = re.compile(r"^(LICEN[CS]E|COPYING)([.-].*)?$", re.IGNORECASE)
# A few unmistakable phrases of the common licenses, for a license file without an SPDX line.
FINGERPRINTS = (
    ("Apache-2.0", ("Apache License", "Version 2.0")),
    ("MIT", ("Permission is hereby granted, free of charge",)),
    ("BSD-3-Clause", ("Redistribution and use in source and binary forms", "Neither the name")),
    ("BSD-2-Clause", ("Redistribution and use in source and binary forms",)),
)
# How a file's license was determined (the lock records it, `vendor diff` re-derives it the same way).
BY_HEADER = "SPDX-License-Identifier"
BY_OPTION = "license="
BY_NAMED_FILE = "license_file="


@dataclass(frozen=True)
class LicenseText:
    path: str  # the license file's path in the upstream repository
    text: str
    spdx: str | None  # the license it is recognised as (None: not recognised)


@dataclass(frozen=True)
class FileLicense:
    spdx: str
    declared_by: str  # BY_HEADER, BY_OPTION, BY_NAMED_FILE + path, or the covering license file's path
    text: LicenseText | None  # None: upstream ships no text for it


def spdx_of(text: str) -> str | None:
    """The first SPDX-License-Identifier in the first 40 lines of `text`."""
    found = SPDX.search("\n".join(text.splitlines()[:40]))
    return found.group(1).strip() if found else None


def identify(text: str) -> str | None:
    tagged = spdx_of(text)
    if tagged:
        return tagged
    for spdx, phrases in FINGERPRINTS:
        if all(phrase in text for phrase in phrases):
            return spdx
    return None


def _read(checkout: Checkout, commit: str, path: str) -> LicenseText | None:
    data = checkout.blob(commit, path)
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    return LicenseText(path=path, text=text, spdx=identify(text))


def named(checkout: Checkout, commit: str, license_file: str) -> LicenseText:
    """The license file a user named (`license_file=`)."""
    found = _read(checkout, commit, clean_path(license_file))
    if found is None:
        raise FarmError(f"license_file={license_file}: not in the checkout at commit {commit}",
                        "name the license file's path relative to the checkout root")
    return found


def covering(checkout: Checkout, commit: str, path: str) -> list[LicenseText]:
    """The license files of the nearest directory holding any: the file's own, else each parent up to the root."""
    parts = PurePosixPath(path).parent.parts
    for depth in range(len(parts), -1, -1):
        directory = "/".join(parts[:depth])
        names = [n for n in checkout.files_in(commit, directory) if LICENSE_NAMES.match(n)]
        texts = [_read(checkout, commit, f"{directory}/{n}" if directory else n) for n in names]
        if any(texts):
            return [t for t in texts if t is not None]
    return []


def _text_for(checkout: Checkout, commit: str, path: str, spdx: str, license_file: str | None) -> LicenseText | None:
    """For a file with its own SPDX line: a license file upstream ships for that very license (recognised as
    it): the named one, else one covering the file, else REUSE's LICENSES/<id>.txt, else the shallowest
    anywhere in the upstream tree. None when upstream ships no text of it."""
    candidates = [named(checkout, commit, license_file)] if license_file else []
    candidates += covering(checkout, commit, path)
    found = next((t for t in candidates if t.spdx == spdx), None)
    if found is not None:
        return found
    reuse = [f"LICENSES/{spdx}.txt", f"LICENSES/{spdx}"] if "/" not in spdx and " " not in spdx else []
    for other in reuse + checkout.files_named(commit, LICENSE_NAMES):
        text = _read(checkout, commit, other)
        if text is not None and text.spdx == spdx:
            return text
    return None


def derive(checkout: Checkout, commit: str, path: str, text: str,
           license_file: str | None = None) -> tuple[FileLicense | None, str]:
    """The file's license by the rule alone (no license=), or None and why it cannot be told."""
    own = spdx_of(text)
    if own:
        return FileLicense(own, BY_HEADER, _text_for(checkout, commit, path, own, license_file)), ""
    files = [named(checkout, commit, license_file)] if license_file else covering(checkout, commit, path)
    if not files:
        return None, "no SPDX-License-Identifier line and no LICENSE*/COPYING* file covers it"
    ids = sorted({t.spdx for t in files if t.spdx})
    shown = ", ".join(t.path for t in files)
    if not ids:
        return None, f"{shown} is not a license the farm recognises"
    if len(ids) > 1:
        return None, f"the license files covering it name different licenses ({shown}: {', '.join(ids)})"
    text_file = next(t for t in files if t.spdx == ids[0])
    by = BY_NAMED_FILE + text_file.path if license_file else text_file.path
    return FileLicense(ids[0], by, text_file), ""


def resolve(checkout: Checkout, commit: str, path: str, text: str, given: str | None,
            license_file: str | None) -> FileLicense:
    """`vendor add`'s rule: derive the file's license; `license=` names it only where the rule cannot tell."""
    given = (given or "").strip() or None
    found, why = derive(checkout, commit, path, text, license_file)
    if found is None:
        if given is None:
            raise FarmError(f"cannot tell the upstream's license of {path} at commit {commit}: {why}",
                            "name it: license=<SPDX id> (e.g. license=MIT), and license_file=<path> for its text")
        files = [named(checkout, commit, license_file)] if license_file else covering(checkout, commit, path)
        return FileLicense(given, BY_OPTION, files[0] if len(files) == 1 else None)
    if given is not None and given != found.spdx:
        raise FarmError(f"license={given} contradicts {path} at commit {commit}: its {found.declared_by} says "
                        f"{found.spdx}",
                        "drop license= (a file's license comes from its SPDX line or the license file covering "
                        "it), or vendor that file in an add of its own")
    return found

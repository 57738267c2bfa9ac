"""Which license an upstream's files are under, and its text, at the vendored commit."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import FarmError
from .gitsrc import Checkout

SPDX = re.compile(r"SPDX-License-Identifier:[ \t]*(\S.*?)[ \t]*(?:\*/|-->)?[ \t]*$", re.MULTILINE)
LICENSE_NAMES = re.compile(r"^(LICEN[CS]E|COPYING)([.-].*)?$", re.IGNORECASE)
# A few unmistakable phrases of the common licenses, for a root license file without an SPDX line.
FINGERPRINTS = (
    ("Apache-2.0", ("Apache License", "Version 2.0")),
    ("MIT", ("Permission is hereby granted, free of charge",)),
    ("BSD-3-Clause", ("Redistribution and use in source and binary forms", "Neither the name")),
    ("BSD-2-Clause", ("Redistribution and use in source and binary forms",)),
)


@dataclass(frozen=True)
class License:
    spdx: str
    text: str | None  # the license file's text (None: upstream ships none at that commit)
    source: str | None  # where the text came from in the upstream repository


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


def detect(checkout: Checkout, commit: str, file_texts: dict[str, str], given: str | None,
           license_file: str | None) -> License:
    """From `license=` (else the files' SPDX lines, else the license file); text from the license file."""
    if license_file:
        data = checkout.blob(commit, license_file)
        if data is None:
            raise FarmError(f"license_file={license_file}: not in the checkout at commit {commit}",
                            "name the license file's path relative to the checkout root")
        source: str | None = license_file
    else:
        names = [n for n in checkout.root_files(commit) if LICENSE_NAMES.match(n)]
        source = names[0] if names else None
        data = checkout.blob(commit, source) if source else None
    text = data.decode("utf-8", "replace") if data is not None else None

    spdx = (given or "").strip() or None
    if spdx is None:
        tagged = sorted({s for s in map(spdx_of, file_texts.values()) if s})
        if len(tagged) > 1:
            raise FarmError(f"the files carry different SPDX-License-Identifier lines ({', '.join(tagged)})",
                            "vendor them separately, or name the license: license=<SPDX id>")
        spdx = tagged[0] if tagged else (identify(text) if text else None)
    if spdx is None:
        where = f"{source} is not a license the farm recognises" if source else (
            "no LICENSE*/COPYING* file at the repository root and no SPDX-License-Identifier line")
        raise FarmError(f"cannot tell the upstream's license at commit {commit}: {where}",
                        "name it: license=<SPDX id> (e.g. license=MIT), and license_file=<path> for its text")
    return License(spdx=spdx, text=text, source=source)

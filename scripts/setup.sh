#!/usr/bin/env bash
# Set up the farm on a fresh machine: a virtualenv in .venv with the pinned toolchain
# (flydsl, the ziglang LLD linker, torch CPU for tracing) and the farm itself.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the farm needs Python >= 3.11")'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
echo "setup done: $(.venv/bin/farm --help >/dev/null && echo 'farm ready in .venv/bin/farm')"

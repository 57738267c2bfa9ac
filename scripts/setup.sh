#!/usr/bin/env bash
# Set up the farm on a fresh machine: a virtualenv in .venv with the pinned toolchain
# (flydsl, the ziglang LLD linker, torch CPU for tracing) and the farm itself, plus the pinned
# disassembler (Debian's llvm-22: llvm-objdump, which verifies instruction classes).
# `--tests` also installs what only the test suite needs (an S3 test server, a second linker).
set -euo pipefail
cd "$(dirname "$0")/.."

# apt packages need root; without it, say exactly what is missing and what needs it.
apt_install() {  # apt_install BINARY PACKAGE WHY
  [ -x "$1" ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2") >/dev/null
  else
    echo "note: $1 missing; as root run: apt-get install $2 ($3)" >&2
  fi
}
apt_install /usr/bin/llvm-objdump-22 llvm-22 "farm build and farm check verify instruction classes with it"
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the farm needs Python >= 3.11")'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
if [ "${1:-}" != "--tests" ]; then
  echo "setup done: $(.venv/bin/farm --help >/dev/null && echo 'farm ready in .venv/bin/farm')"
  exit 0
fi
# The tests' S3 endpoint (moto_server on loopback) lives in its own venv: installing moto next to
# dvc-s3 moves botocore past the range aiobotocore pins.
[ -x .venv-s3/bin/python ] || "$PYTHON" -m venv .venv-s3
.venv-s3/bin/python -m pip install --quiet --disable-pip-version-check 'moto[server]==5.2.5' 'boto3==1.44.8'
# A second, different linker for the tests that prove an audit names a linker change (Debian's
# LLD 19, as TOOLCHAIN.md measured). Needs root and apt; the farm's own pin does not use it.
apt_install /usr/lib/llvm-19/bin/ld.lld lld-19 "two audit/diff tests need it"
echo "setup done: $(.venv/bin/farm --help >/dev/null && echo 'farm ready in .venv/bin/farm')"

#!/usr/bin/env bash
# Set up the farm on a fresh machine: a virtualenv in .venv with the pinned toolchain
# (flydsl, the ziglang LLD linker, torch CPU for tracing) and the farm itself, plus the pinned
# disassembler (Debian's llvm-22: llvm-objdump, which verifies instruction classes).
# `--tests` also installs what only the test suite needs (an S3 test server, a second linker).
#
# Every Python package comes from requirements.lock (pytest included; requirements-s3.lock for the S3
# test server): exact versions, and pip refuses any file whose SHA256 the lock does not list, so two
# machines get the same bytes. torch is the CPU wheel torch==2.13.0+cpu, which pip finds on this kind of
# machine's disk through its configuration (find-links /opt/wheels, see `pip config list`).
# Regenerate the locks after changing pyproject.toml's dependencies (pip-tools 7.6.2, in a scratch venv):
#   pip-compile --allow-unsafe --extra=dev --generate-hashes --no-emit-find-links --no-emit-index-url \
#     --output-file=requirements.lock --strip-extras pyproject.toml
#   pip-compile --allow-unsafe --generate-hashes --no-emit-find-links --no-emit-index-url \
#     --output-file=requirements-s3.lock --strip-extras requirements-s3.in
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
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --require-hashes --no-deps -r requirements.lock
# The farm itself, built with the locked setuptools (no build environment fetched from the index).
"${PIP[@]}" --no-deps --no-build-isolation -e .
# pip calls a distribution edited in place "already satisfied"; the toolchain's content check names those
# whose files differ from their RECORD (farm/toolchain/pin.py), and they are reinstalled from the lock.
lock_entries() {  # the lock's requirement lines and hashes for the named packages
  awk -v names=" $* " '/^[^ #]/ { split($1, r, "=="); keep = index(names, " " r[1] " ") > 0 } keep && !/^ *#/' \
    requirements.lock
}
damaged=$(.venv/bin/python -m farm.toolchain.pin | cut -d' ' -f1 || true)
if [ -n "$damaged" ]; then
  echo "reinstalling (files differ from their RECORD): $damaged" >&2
  "${PIP[@]}" --require-hashes --no-deps --force-reinstall -r <(lock_entries $damaged)
  .venv/bin/python -m farm.toolchain.pin >&2 || { echo "still differ: see above" >&2; exit 1; }
fi
if [ "${1:-}" != "--tests" ]; then
  echo "setup done: $(.venv/bin/farm --help >/dev/null && echo 'farm ready in .venv/bin/farm')"
  exit 0
fi
# The tests' S3 endpoint (moto_server on loopback) lives in its own venv: installing moto next to
# dvc-s3 moves botocore past the range aiobotocore pins.
[ -x .venv-s3/bin/python ] || "$PYTHON" -m venv .venv-s3
.venv-s3/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
  -r requirements-s3.lock
# A second, different linker for the tests that prove an audit names a linker change (Debian's
# LLD 19, whose identity differs in .comment). Needs root and apt; the farm's own pin does not use it.
apt_install /usr/lib/llvm-19/bin/ld.lld lld-19 "two audit/diff tests need it"
echo "setup done: $(.venv/bin/farm --help >/dev/null && echo 'farm ready in .venv/bin/farm')"

"""Vendored upstream sources: bring files in with recorded provenance, diff them against upstream.

`farm vendor add` copies files from a local git checkout at a pinned commit into kernels_src/ and
records where they came from in kernels_src/VENDOR.lock.json (farm/store/vendored.py), refusing files
whose imports nothing would serve (closure.py); `farm vendor diff` compares them with
their upstream blobs after normalising both sides with `ruff format`; `farm vendor note` records a
local modification so the diff knows it is intended.
"""

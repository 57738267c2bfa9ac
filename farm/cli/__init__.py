"""The `farm` command: argparse front (parser, verbs) and one module per group of verbs."""

from farm.cli.app import main

__all__ = ["main"]

"""Do torch or numpy change the bytes? Compile rows fresh twice: as installed, and with other packages first on
the compile's import path, then compare the objects.

    python bench/dependency_bytes.py site=/tmp/alt/numpy126 [per_dir=2] [ops=[...] targets=[...] ...]

`site=` is a directory holding another version of a package (e.g. `pip install --no-deps --target
/tmp/alt/numpy126 numpy==1.26.4`); it goes in front of the compile's PYTHONPATH, so the compile imports that
version while everything else stays as installed. `per_dir=` rows of every selected op/target directory are
compiled (the first ones of the instance table). Prints the versions each side imported, one line per row
that differs, and last `rows=N identical=I differ=D failed=F`; exit 1 when any object differs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fresh_compile import compile_fresh, private_env

from farm.build import compile_request
from farm.table import config as config_mod
from farm.table.config import FarmConfig
from farm.table.expand import fresh_rows
from farm.table.rows import Row

PROBE = "import numpy, torch; print('numpy', numpy.__version__, 'torch', torch.__version__)"


@dataclass(frozen=True)
class Outcome:
    row: Row
    installed: str  # SHA256 of the object, or "failed: <reason>"
    alternative: str


def _with_site(env: dict[str, str], site: Path | None) -> dict[str, str]:
    return env if site is None else env | {"PYTHONPATH": f"{site}{os.pathsep}{env['PYTHONPATH']}"}


def versions(cfg: FarmConfig, row: Row, work: Path, site: Path | None) -> str:
    """The numpy and torch a compile with this environment imports."""
    env = _with_site(private_env(work, compile_request(cfg, row).target, cfg.toolchain_pin.get("linker")), site)
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=work, env=env, capture_output=True, text=True)
    return proc.stdout.strip() or proc.stderr.strip().splitlines()[-1]


def compile_digest(cfg: FarmConfig, row: Row, work: Path, site: Path | None) -> str:
    out = work / "object.bin"
    env = _with_site(private_env(work, compile_request(cfg, row).target, cfg.toolchain_pin.get("linker")), site)
    try:
        compile_fresh(cfg, row, work, out, {"PYTHONPATH": env["PYTHONPATH"]})
    except SystemExit as exc:
        return f"failed: {str(exc).strip().splitlines()[-1]}"
    return hashlib.sha256(out.read_bytes()).hexdigest()


def sample(rows: list[Row], per_dir: int) -> list[Row]:
    """The first `per_dir` rows of every op/target directory."""
    taken: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        group = taken.setdefault((row.op, row.target), [])
        if len(group) < per_dir:
            group.append(row)
    return [row for group in taken.values() for row in group]


def main(args: list[str]) -> int:
    opts = dict(a.split("=", 1) for a in args if a.split("=", 1)[0] in ("site", "per_dir"))
    if "site" not in opts:
        raise SystemExit(__doc__)
    site = Path(opts["site"]).resolve()
    overrides = [a for a in args if a.split("=", 1)[0] not in ("site", "per_dir")]
    cfg = config_mod.load(config_mod.find_project_root(), overrides)
    rows, _ = fresh_rows(cfg)
    rows = sample(rows, int(opts.get("per_dir", "2")))
    root = Path(tempfile.mkdtemp(prefix="farm-depbytes-"))
    print(f"installed:   {versions(cfg, rows[0], root / 'probe-a', None)}")
    print(f"alternative: {versions(cfg, rows[0], root / 'probe-b', site)}")

    def one(i: int) -> Outcome:
        row = rows[i]
        return Outcome(row, compile_digest(cfg, row, root / f"{i:04d}a", None),
                       compile_digest(cfg, row, root / f"{i:04d}b", site))

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        outcomes = list(pool.map(one, range(len(rows))))
    failed = [o for o in outcomes if o.installed.startswith("failed") or o.alternative.startswith("failed")]
    differ = [o for o in outcomes if o not in failed and o.installed != o.alternative]
    for o in failed:
        print(f"FAILED {o.row.key}: installed {o.installed[:80]} | alternative {o.alternative[:80]}")
    for o in differ:
        print(f"DIFFER {o.row.key}: {o.installed[:16]} vs {o.alternative[:16]}")
    identical = len(outcomes) - len(failed) - len(differ)
    print(f"rows={len(outcomes)} identical={identical} differ={len(differ)} failed={len(failed)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Where the vendoring commands read and write: the project root and its kernels directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from farm.core.errors import FarmError
from farm.table import config as config_mod
from farm.vendoring.docs import shown


@dataclass(frozen=True)
class Project:
    root: Path
    kernels_dir: Path

    def show(self, rel: str) -> str:
        """A vendored file's path as the user sees it, e.g. kernels_src/vendor/flydsl/x.py."""
        return f"{shown(self.root, self.kernels_dir)}/{rel}"

    def rel_of(self, given: str) -> str:
        """A user's path to a vendored file (from the cwd, the project root or kernels_src/) -> rel to kernels_src/."""
        raw = Path(given).expanduser()
        for candidate in ([raw] if raw.is_absolute() else [Path.cwd() / raw, self.root / raw, self.kernels_dir / raw]):
            try:
                return candidate.resolve().relative_to(self.kernels_dir.resolve()).as_posix()
            except ValueError:
                continue
        raise FarmError(f"path={given}: not under {self.kernels_dir}",
                        f"name a vendored file, e.g. path={shown(self.root, self.kernels_dir)}/vendor/NAME/file.py")


def open_project() -> Project:
    root = config_mod.find_project_root()
    cfg = config_mod.load(root, [])
    return Project(root=root, kernels_dir=cfg.kernels_dir)

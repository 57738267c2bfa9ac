"""One error type for everything a user can fix: it names the thing and the fix."""


class FarmError(Exception):
    """A user-facing error. `str()` is the whole message; the CLI prints it and exits 2."""

    def __init__(self, what: str, fix: str | None = None) -> None:
        self.what = what
        self.fix = fix
        super().__init__(what if fix is None else f"{what}\n  fix: {fix}")

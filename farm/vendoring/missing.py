"""An add's missing imports as one error: each module named once, and a fix that works.

Each line names one module with every file and line that imports it (and the function, for an import inside
one: it runs only when that function runs) and the upstream file that would be it. The fix is worked out
and checked against the import closure before it is suggested:
- upstream's files for the missing modules, found transitively (a file brought in may import more), each
  placed at the import path the code uses. When every file of the add, old and new, sits below one of a
  few upstream folders exactly as its import path says, the fix is one add with `base=` (a file keeps its
  path below its base). Otherwise, when upstream's files alone make an add that passes the check, the fix
  is that add first and then this one again;
- for a module upstream does not have: a module of the user's own at its import path, or installing it.
Nothing is written: the add that failed left everything as it was.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from farm.core.errors import FarmError
from farm.vendoring import closure
from farm.vendoring.gitsrc import Checkout
from farm.vendoring.project import Project

MAX_ROUNDS = 50  # upstream files brought in one after another (each may import more); the closure is finite
DOC = "docs/adding-a-family.md, section 4"


@dataclass(frozen=True)
class Attempt:
    """The add that failed: where it came from, the options as given, and its files."""

    project: Project
    checkout: Checkout
    commit: str
    opts: dict[str, str]
    places: dict[str, str]  # upstream path -> destination relative to kernels_src/
    texts: dict[str, str]  # destination -> the upstream text


@dataclass(frozen=True)
class _Found:
    """Upstream's files for the missing modules, placed at their import paths, and what is still missing."""

    places: dict[str, str]  # upstream path -> destination, the attempt's own files first
    texts: dict[str, str]
    missing: list[closure.Missing]  # with those files added: modules upstream has no file for


def candidates(checkout: Checkout, commit: str, module: str) -> list[str]:
    """Upstream files at `commit` that could be `module` (their path ends like its import path), shallowest first."""
    base = module.replace(".", "/")
    last = base.rsplit("/", 1)[-1]
    found = checkout.files_named(commit, re.compile(rf"^({re.escape(last)}\.py|__init__\.py)$"))
    return [p for p in found if any(p == end or p.endswith("/" + end) for end in (base + ".py", base + "/__init__.py"))]


def _wanted(site: closure.Missing) -> list[str]:
    """The modules that would satisfy a missing import: the module itself, and for `from P import n` of a
    missing package P, its submodules P.n (upstream may have them though it has no file for P)."""
    return [site.module] + [f"{site.module}.{name}" for name in site.names]


def _upstream_files(attempt: Attempt, site: closure.Missing) -> list[tuple[str, str]]:
    """(module, upstream file) pairs that would satisfy `site`: the module's own files, else its submodules'."""
    own = [(site.module, p) for p in candidates(attempt.checkout, attempt.commit, site.module)]
    return own or [(m, p) for m in _wanted(site)[1:] for p in candidates(attempt.checkout, attempt.commit, m)]


def _place_of(module: str, upstream_path: str) -> str:
    """Where upstream file `upstream_path` must sit under kernels_src/ to be imported as `module`."""
    tail = "/__init__.py" if upstream_path.endswith("__init__.py") else ".py"
    return module.replace(".", "/") + tail


def _base_of(upstream_path: str, place: str) -> str | None:
    """The upstream folder below which `upstream_path` keeps the path `place` ('.': the root); None if none."""
    if upstream_path == place:
        return "."
    return upstream_path[: -len(place) - 1] if upstream_path.endswith("/" + place) else None


def placed_by(upstream_path: str, bases: list[str]) -> str | None:
    """Where `base=` puts an upstream file: its path below the longest base holding it (None: below none)."""
    holding = [b for b in bases if b == "." or upstream_path.startswith(b + "/")]
    if not holding:
        return None
    base = max(holding, key=lambda b: 0 if b == "." else len(b))
    return upstream_path if base == "." else upstream_path[len(base) + 1:]


def _text(checkout: Checkout, commit: str, path: str) -> str | None:
    """An upstream Python file's text, None when it is not UTF-8 or not Python this interpreter parses."""
    data = checkout.blob(commit, path)
    try:
        text = data.decode("utf-8") if data is not None else None
        if text is not None:
            ast.parse(text)
    except (UnicodeDecodeError, SyntaxError):
        return None
    return text


def _still_missing(attempt: Attempt, texts: dict[str, str]) -> list[closure.Missing]:
    exclude = [attempt.project.root, attempt.project.kernels_dir]
    return closure.missing_imports(closure.Tree(attempt.project.kernels_dir, texts), list(texts), exclude)


def _find(attempt: Attempt, missing: list[closure.Missing]) -> _Found:
    """Bring in upstream's file for each missing module, at its import path, until no more can be found."""
    places, texts = dict(attempt.places), dict(attempt.texts)
    for _ in range(MAX_ROUNDS):
        added = False
        for site in missing:
            if site.module.startswith("."):
                continue
            for module, path in _upstream_files(attempt, site):
                place = _place_of(module, path)
                if path in places or place in texts:
                    continue
                text = _text(attempt.checkout, attempt.commit, path)
                if text is None:
                    continue
                places[path], texts[place] = place, text
                added = True
                if module == site.module:
                    break
        if not added:
            break
        missing = _still_missing(attempt, texts)
    return _Found(places, texts, missing)


def _command(attempt: Attempt, bases: list[str], paths: list[str]) -> str:
    """The `farm vendor add` that vendors `paths` with `base=` (the attempt's other options kept)."""
    words = [f"from={attempt.opts['from']}", f"commit={attempt.commit}", f"upstream={attempt.opts['upstream']}",
             f"base=[{','.join(sorted(bases))}]", f"paths=[{','.join(paths)}]"]
    kept = ("url", "license", "license_file", "force")
    words += [f"{key}={attempt.opts[key]}" for key in kept if attempt.opts.get(key)]
    return "farm vendor add " + " ".join(words)


def _one_add(attempt: Attempt, found: _Found, open_modules: set[str]) -> str | None:
    """One add with base= that puts every file at its import path, when there is one that passes the check.
    The attempt's files keep their places when base= can say them, else go where upstream's folders put them."""
    bases = {b for path, place in found.places.items() if path not in attempt.places
             for b in [_base_of(path, place)] if b is not None}
    bases |= {b for path, place in attempt.places.items() for b in [_base_of(path, place)] if b is not None}
    places = {path: placed_by(path, sorted(bases)) for path in found.places}
    if any(place is None for place in places.values()) or len(set(places.values())) != len(places):
        return None
    texts = {place: found.texts[found.places[path]] for path, place in places.items() if place is not None}
    if any(m.module not in open_modules for m in _still_missing(attempt, texts)):
        return None
    return _command(attempt, sorted(bases), list(found.places))


def _dependencies_first(attempt: Attempt, found: _Found, open_modules: set[str]) -> str | None:
    """An add of upstream's files alone, when it passes the check by itself: then the attempt passes too."""
    new = {path: place for path, place in found.places.items() if path not in attempt.places}
    bases = sorted({b for path, place in new.items() for b in [_base_of(path, place)] if b is not None})
    if not new or any(placed_by(path, bases) != place for path, place in new.items()):
        return None
    texts = {place: found.texts[place] for place in new.values()}
    if any(m.module not in open_modules for m in _still_missing(attempt, texts)):
        return None
    return _command(attempt, bases, list(new))


def _line(attempt: Attempt, module: str, sites: list[closure.Missing]) -> str:
    upstream_of = {place: path for path, place in attempt.places.items()}
    shown = []
    for site in sites:
        where = f"{attempt.project.show(site.importer)}:{site.line}"
        where += f" in {site.function}()" if site.function else ""
        where += f" (upstream {upstream_of[site.importer]})" if site.importer in upstream_of else ""
        shown.append(where)
    line = f"  - {module}: imported by {', '.join(shown)}"
    if module.startswith("."):
        return line + "; a relative import above kernels_src/ (the file's package must sit deeper)"
    found = list(dict.fromkeys(path for site in sites for _, path in _upstream_files(attempt, site)))
    return line + (f"; upstream has {', '.join(found)}" if found else "; upstream has no file for it")


def _own_module(module: str) -> str:
    return f"kernels_src/{module.replace('.', '/')}.py"


def missing_error(attempt: Attempt, missing: list[closure.Missing]) -> FarmError:
    """The one error for an add whose files import modules found nowhere, with a fix that passes the check."""
    by_module: dict[str, list[closure.Missing]] = {}
    for site in missing:
        by_module.setdefault(site.module, []).append(site)
    lines = [_line(attempt, module, sites) for module, sites in by_module.items()]
    found = _find(attempt, missing)
    open_modules = {m.module for m in found.missing}
    fix: list[str] = []
    own = [m for m in dict.fromkeys(m.module for m in found.missing) if not m.startswith(".")]
    if own:
        fix.append(f"first write a module of your own at {', '.join(_own_module(m) for m in own)} "
                   f"(or install {'it' if len(own) == 1 else 'them'} into the farm's environment)")
    if len(found.places) > len(attempt.places):
        one = _one_add(attempt, found, open_modules)
        first = None if one else _dependencies_first(attempt, found, open_modules)
        if one:
            fix.append(f"{'then ' if fix else ''}vendor upstream's files at the import paths the code uses "
                       f"(base= keeps each file's path below that folder): {one}")
        elif first:
            fix.append(f"{'then ' if fix else ''}vendor upstream's files at the import paths the code uses: {first}; "
                       "then run this add again")
        else:
            fix.append(f"{'then ' if fix else ''}vendor each upstream file above so that it lands at its module's "
                       "import path (kernels_src/<a>/<b>.py for a.b: base= keeps upstream's folders)")
    if any(m.module.startswith(".") for m in found.missing):
        fix.append("place the files whose relative imports climb above kernels_src/ deeper (into=, base=)")
    if any(site.function for site in missing):
        fix.append(f"an import inside a function the compile never calls (host-only code) can be a stand-in of "
                   f"your own at that path ({DOC})")
    if not fix:
        fix.append("install it, or first put a module of your own at its import path under kernels_src/")
    return FarmError(f"{len(by_module)} module(s) imported by the vendored files are neither vendored nor installed "
                     "(kernels_src/ is first on the compile's sys.path):\n" + "\n".join(lines), "; ".join(fix))


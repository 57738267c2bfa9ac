"""farm vendor: add files from a synthetic upstream git repository, diff them, record modifications.

Every test makes its own upstream with `git init` (fixed identity and dates) and its own project copy.
The last test compiles one row to prove that a vendored module is part of the input digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import copy_project, run_farm, shrink_op, small_copy

MIT = ("MIT License\n\nCopyright (c) 2024 Synth Authors\n\n"
       "Permission is hereby granted, free of charge, to any person.\n")
CONSTS = ('# SPDX-License-Identifier: MIT\n"""Constants shared by the synth kernels."""\n\n'
          "TRACE_M = 4\n\n\ndef scale(x):\n    return x * 2\n")
UTIL = "def clamp(value, low, high):\n    return max(low, min(high, value))\n"
URL = "https://example.invalid/synth.git"
HEADER_BEGIN = "# --- vendored by `farm vendor`: provenance of this file (rewritten by farm vendor, do not edit) ---"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "Synth", "GIT_AUTHOR_EMAIL": "synth@example.invalid",
           "GIT_COMMITTER_NAME": "Synth", "GIT_COMMITTER_EMAIL": "synth@example.invalid",
           "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=repo,
                          env=env, check=True, capture_output=True, text=True).stdout.strip()


def commit_files(repo: Path, files: dict[str, str | None], message: str) -> str:
    """Write (or, for None, delete) files and commit them; the new full commit id."""
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            git(repo, "rm", "-q", rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(repo, "add", rel)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_upstream(where: Path, license_text: str | None = MIT, consts: str = CONSTS) -> tuple[Path, str]:
    repo = where / "synth-upstream"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "remote", "add", "origin", URL)
    files: dict[str, str | None] = {"helpers/consts.py": consts, "kernels/util.py": UTIL, "docs/notes.txt": "notes\n"}
    if license_text is not None:
        files["LICENSE"] = license_text
    return repo, commit_files(repo, files, "first")


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, str]:
    project = copy_project(tmp_path / "proj")
    repo, first = make_upstream(tmp_path)
    return project, repo, first


def vendor(project: Path, *args: str) -> subprocess.CompletedProcess:
    return run_farm(project, "vendor", *args)


def add(project: Path, repo: Path, commit: str, *extra: str, paths: str = "[helpers/consts.py,kernels/util.py]"):
    return vendor(project, "add", f"from={repo}", f"commit={commit}", "upstream=synth", f"paths={paths}", *extra)


def header(commit: str, path: str, mods: list[str] | None = None, license_id: str = "MIT") -> str:
    return "\n".join([HEADER_BEGIN, "# upstream: synth", f"# repository: {URL}", f"# commit: {commit}",
                      f"# path: {path}", f"# license: {license_id}", "# Local modifications:",
                      *[f"# - {m}" for m in (mods or ["none"])], "# --- end of vendored header ---", ""])


CONSTS_REL = "kernels_src/vendor/synth/helpers/consts.py"
UTIL_REL = "kernels_src/vendor/synth/kernels/util.py"


def test_add_records_provenance(setup: tuple[Path, Path, str]) -> None:
    project, repo, first = setup
    proc = add(project, repo, first[:8])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"added {CONSTS_REL} from synth helpers/consts.py at {first}\n"
        f"added {UTIL_REL} from synth kernels/util.py at {first}\n"
        "license: MIT (text from LICENSE)\n"
        "wrote THIRD_PARTY_LICENSES.md\n"
        "wrote kernels_src/vendor/SOURCE.md\n"
        "recorded in kernels_src/VENDOR.lock.json\n")
    assert (project / CONSTS_REL).read_text() == header(first, "helpers/consts.py") + CONSTS
    assert (project / UTIL_REL).read_text() == header(first, "kernels/util.py") + UTIL

    lock = json.loads((project / "kernels_src" / "VENDOR.lock.json").read_text())
    blob = subprocess.run(["git", "show", f"{first}:helpers/consts.py"], cwd=repo, capture_output=True,
                          check=True).stdout
    assert lock["files"]["vendor/synth/helpers/consts.py"] == {
        "upstream": "synth", "commit": first, "path": "helpers/consts.py",
        "sha256": hashlib.sha256(blob).hexdigest(), "modifications": [],
        "license": {"id": "MIT", "declared_by": "SPDX-License-Identifier", "text": "vendor/synth/LICENSE"}}
    # util.py has no SPDX line: the root LICENSE covers it.
    assert lock["files"]["vendor/synth/kernels/util.py"]["license"] == {
        "id": "MIT", "declared_by": "LICENSE", "text": "vendor/synth/LICENSE"}
    assert lock["upstreams"]["synth"] == {"url": URL}
    assert lock["license_texts"] == {"vendor/synth/LICENSE": {
        "upstream": "synth", "commit": first, "path": "LICENSE", "sha256": hashlib.sha256(MIT.encode()).hexdigest(),
        "license": "MIT"}}
    # Canonical: re-serialising with sorted keys and the farm's indentation gives the same bytes.
    text = (project / "kernels_src" / "VENDOR.lock.json").read_text()
    assert text == json.dumps(lock, sort_keys=True, indent=2) + "\n"
    assert (project / "kernels_src/vendor/synth/LICENSE").read_text() == MIT

    notices = (project / "THIRD_PARTY_LICENSES.md").read_text()
    assert f"- `{CONSTS_REL}` from `helpers/consts.py` at commit `{first}`" in notices
    assert "- license: MIT" in notices and f"- repository: {URL}" in notices
    assert "```text\n" + MIT.rstrip("\n") + "\n```" in notices
    source_md = (project / "kernels_src/vendor/SOURCE.md").read_text()
    assert f"| `synth/helpers/consts.py` | synth ({URL}) | `helpers/consts.py` | `{first}` | MIT | none |" in source_md

    proc = vendor(project, "diff", f"from={repo}", "--strict")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"upstream synth: 2 vendored file(s); checkout {repo} at {first}\n"
        f"clean                    {CONSTS_REL}\n"
        f"clean                    {UTIL_REL}\n"
        "2 file(s): 2 clean\n")


def test_reformatted_only_is_clean(setup: tuple[Path, Path, str]) -> None:
    project, repo, first = setup
    add(project, repo, first)
    path = project / CONSTS_REL
    path.write_text(path.read_text().replace("TRACE_M = 4", "TRACE_M=4").replace("return x * 2", "return (x*2)"))
    proc = vendor(project, "diff", f"from={repo}", "strict=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"clean                    {CONSTS_REL}: differs from upstream in formatting only\n" in proc.stdout
    assert proc.stdout.endswith("2 file(s): 2 clean\n")


def test_local_change_flagged_until_recorded(setup: tuple[Path, Path, str]) -> None:
    project, repo, first = setup
    add(project, repo, first)
    path = project / CONSTS_REL
    path.write_text(path.read_text().replace("TRACE_M = 4", "TRACE_M = 8"))

    hunk = ['@@ -1,7 +1,7 @@{mark}', " # SPDX-License-Identifier: MIT", ' """Constants shared by the synth kernels."""',
            " ", "-TRACE_M = 4", "+TRACE_M = 8", " ", " ", " def scale(x):"]
    unrecorded = "\n".join([f"UNRECORDED changes       {CONSTS_REL}",
                            f"--- upstream/helpers/consts.py @ {first} (ruff format)",
                            f"+++ {CONSTS_REL} (header stripped, ruff format)", *hunk]) + "\n"
    proc = vendor(project, "diff", f"from={repo}")
    assert proc.returncode == 0, proc.stderr
    assert unrecorded.format(mark=" UNRECORDED") in proc.stdout
    assert proc.stdout.endswith("2 file(s): 1 clean, 1 UNRECORDED changes\n")
    proc = vendor(project, "diff", f"from={repo}", "strict=true")
    assert proc.returncode == 1
    assert "FAIL: 1 file(s) have changes no recorded modification covers (strict=true)" in proc.stdout

    proc = vendor(project, "note", f"path={CONSTS_REL}", "why=trace with 8 rows", f"from={repo}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"recorded 1 change(s) in {CONSTS_REL} as a local modification: trace with 8 rows\n"
    assert path.read_text() == header(first, "helpers/consts.py", ["trace with 8 rows"]) + CONSTS.replace("= 4", "= 8")
    lock = json.loads((project / "kernels_src" / "VENDOR.lock.json").read_text())
    assert lock["files"]["vendor/synth/helpers/consts.py"]["modifications"] == [
        {"why": "trace with 8 rows", "changes": [{"removed": ["TRACE_M = 4"], "added": ["TRACE_M = 8"]}]}]
    assert "| MIT | trace with 8 rows |" in (project / "kernels_src/vendor/SOURCE.md").read_text()

    proc = vendor(project, "diff", f"from={repo}", "strict=true")
    assert proc.returncode == 0, proc.stdout
    recorded = unrecorded.replace("UNRECORDED changes      ", "modified (all recorded) ")
    assert recorded.format(mark=" recorded: trace with 8 rows") in proc.stdout
    assert proc.stdout.endswith("2 file(s): 1 clean, 1 modified (all recorded)\n")

    proc = vendor(project, "note", f"path={CONSTS_REL}", "why=again", f"from={repo}")
    assert proc.returncode == 2
    assert "has no unrecorded changes against upstream; nothing to note" in proc.stderr

    # A further edit is flagged on its own; the recorded one stays recorded.
    path.write_text(path.read_text().replace("return x * 2", "return x * 3"))
    proc = vendor(project, "diff", f"from={repo}", "--strict")
    assert proc.returncode == 1
    assert "@@ -1,8 +1,8 @@ UNRECORDED (partly recorded: trace with 8 rows)\n" in proc.stdout
    assert "-    return x * 2\n+    return x * 3\n" in proc.stdout


def test_upstream_moved_is_reported(setup: tuple[Path, Path, str]) -> None:
    project, repo, first = setup
    add(project, repo, first)
    second = commit_files(repo, {"helpers/consts.py": CONSTS.replace("x * 2", "x * 3"), "kernels/util.py": None},
                          "second")
    expected_head = (
        f"upstream synth: 2 vendored file(s); checkout {repo} at {second}\n"
        f"pinned {first}, checkout at {second}: the checkout is not at the pinned commit\n"
        f"  changed upstream since the pinned commit: helpers/consts.py ({CONSTS_REL})\n"
        f"  removed upstream since the pinned commit: kernels/util.py ({UTIL_REL})\n"
        f"clean                    {CONSTS_REL}\n"
        f"clean                    {UTIL_REL}\n"
        "2 file(s): 2 clean\n")
    removed = f"FAIL: 1 vendored file(s) were removed upstream by the checkout's commit {second}\n"
    proc = vendor(project, "diff", f"from={repo}")
    assert (proc.returncode, proc.stdout) == (1, expected_head + removed), proc.stderr
    proc = vendor(project, "diff", f"from={repo}", "pinned=true")
    assert proc.returncode == 1
    assert proc.stdout == expected_head + removed + "FAIL: the checkout is not at the pinned commit (pinned=true)\n"
    # Upstream only changed (nothing removed): reported, exit 0 unless pinned=true.
    third = commit_files(repo, {"kernels/util.py": UTIL}, "util is back")
    proc = vendor(project, "diff", f"from={repo}")
    assert proc.returncode == 0, proc.stdout
    assert f"pinned {first}, checkout at {third}: the checkout is not at the pinned commit\n" in proc.stdout
    assert f"  changed upstream since the pinned commit: helpers/consts.py ({CONSTS_REL})\n" in proc.stdout
    assert "removed upstream" not in proc.stdout

    # Moving the pin: a locally modified file is kept unless forced; a clean one is updated.
    path = project / CONSTS_REL
    path.write_text(path.read_text() + "EXTRA = 1\n")
    proc = add(project, repo, second, paths="[helpers/consts.py]")
    assert proc.returncode == 2
    assert f"{CONSTS_REL} has local modifications (none recorded); re-adding it would drop them" in proc.stderr
    assert "EXTRA = 1" in path.read_text()
    proc = add(project, repo, second, "force=true", paths="[helpers/consts.py]")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"updated {CONSTS_REL}: {first} -> {second} (local modifications dropped)\n")
    assert path.read_text() == header(second, "helpers/consts.py") + CONSTS.replace("x * 2", "x * 3")


def test_missing_upstream_exits_nonzero(setup: tuple[Path, Path, str]) -> None:
    project, repo, first = setup
    add(project, repo, first)
    second = commit_files(repo, {"kernels/util.py": None}, "drop util")
    lock_path = project / "kernels_src" / "VENDOR.lock.json"
    lock = json.loads(lock_path.read_text())
    # The whole pin moved to `second` (say by hand), where util.py no longer exists upstream.
    for rec in lock["files"].values():
        rec["commit"] = second
    lock_path.write_text(json.dumps(lock))
    proc = vendor(project, "diff", f"from={repo}")
    assert proc.returncode == 1
    assert proc.stdout == (
        f"upstream synth: 2 vendored file(s); checkout {repo} at {second}\n"
        f"clean                    {CONSTS_REL}\n"
        f"MISSING upstream         {UTIL_REL}: kernels/util.py does not exist at the pinned commit {second}\n"
        "2 file(s): 1 clean, 1 MISSING upstream\n"
        "FAIL: 1 vendored file(s) have no upstream counterpart at the pinned commit\n")

    # A checkout that does not have the pinned commit at all.
    lock["files"]["vendor/synth/kernels/util.py"]["commit"] = "0" * 40
    lock_path.write_text(json.dumps(lock))
    proc = vendor(project, "diff", f"from={repo}")
    assert proc.returncode == 1
    assert f"MISSING upstream         {UTIL_REL}: the pinned commit {'0' * 40} is not in {repo}" in proc.stdout


def test_into_family_dir_with_given_license(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "proj")
    untagged = CONSTS.replace("# SPDX-License-Identifier: MIT\n", "")
    repo, first = make_upstream(tmp_path, license_text=None, consts=untagged)
    family_md = (project / "kernels_src/rmsnorm/SOURCE.md").read_text()
    proc = add(project, repo, first, paths="[helpers/consts.py]")
    assert proc.returncode == 2
    assert "cannot tell the upstream's license" in proc.stderr and "license=<SPDX id>" in proc.stderr
    assert not (project / "kernels_src" / "VENDOR.lock.json").exists()
    assert not (project / "kernels_src" / "vendor").exists()

    proc = add(project, repo, first, "into=rmsnorm", "license=Apache-2.0", f"url={URL}-mirror",
               paths="[helpers/consts.py]")
    assert proc.returncode == 0, proc.stderr
    assert "license: Apache-2.0 (no license file)\n" in proc.stdout
    text = (project / "kernels_src/rmsnorm/consts.py").read_text()
    assert "# license: Apache-2.0\n" in text and f"# repository: {URL}-mirror\n" in text
    now = (project / "kernels_src/rmsnorm/SOURCE.md").read_text()
    assert now.startswith(family_md.rstrip("\n") + "\n\n<!-- farm vendor: begin generated section")
    assert f"| `consts.py` | synth ({URL}-mirror) | `helpers/consts.py` | `{first}` | Apache-2.0 | none |" in now
    assert "ships no license file at commit" in (project / "THIRD_PARTY_LICENSES.md").read_text()
    # Adding again at the same commit changes nothing and keeps one generated section.
    proc = add(project, repo, first, "into=rmsnorm", "license=Apache-2.0", f"url={URL}-mirror",
               paths="[helpers/consts.py]")
    assert proc.stdout.startswith("unchanged kernels_src/rmsnorm/consts.py (already at")
    assert (project / "kernels_src/rmsnorm/SOURCE.md").read_text() == now


@pytest.mark.parametrize("args, message", [
    ((), "no sub-verb; accepted: add, diff, note"),
    (("update",), "unknown sub-verb 'update'; accepted: add, diff, note"),
    (("add", "from={repo}", "comit=HEAD", "upstream=synth", "paths=[a.py]"),
     "add: unknown key 'comit'; did you mean 'commit'? (accepted: from, commit, upstream, paths, into, base, url, "
     "license, license_file, force)"),
    (("diff", "from={repo}", "--strikt"), "diff: unknown flag --strikt (accepted: --strict, --pinned)"),
    (("add", "from={repo}", "upstream=synth", "paths=[a.py]"), "add: missing commit="),
    (("add", "from={tmp}", "commit=HEAD", "upstream=synth", "paths=[helpers/consts.py]"), "not a git checkout"),
    (("add", "from={repo}", "commit=feedface", "upstream=synth", "paths=[helpers/consts.py]"),
     "commit=feedface: no such commit in"),
    (("add", "from={repo}", "commit=HEAD", "upstream=synth", "paths=[helpers/nope.py]"),
     "paths: helpers/nope.py is not a file in"),
    (("add", "from={repo}", "commit=HEAD", "upstream=synth", "paths=[docs/notes.txt]"),
     "paths: docs/notes.txt is not a Python file"),
    (("add", "from={repo}", "commit=HEAD", "upstream=synth", "paths=[../x.py]"), "not a relative path inside"),
    (("add", "from={repo}", "commit=HEAD", "upstream=Synth!", "paths=[helpers/consts.py]"), "not a simple name"),
    (("add", "from={repo}", "commit=HEAD", "upstream=synth", "paths=[helpers/consts.py]", "into=rmsnorm",
      "force=maybe"), "force=maybe: not a boolean"),
    (("diff", "from={repo}"), "nothing is vendored"),
])
def test_bad_input_is_one_clear_error(setup: tuple[Path, Path, str], args: tuple[str, ...], message: str) -> None:
    project, repo, _ = setup
    proc = vendor(project, *(a.format(repo=repo, tmp=project.parent) for a in args))
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith("farm vendor: error: ") and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (project / "kernels_src" / "VENDOR.lock.json").exists()


def test_refuses_to_overwrite_a_project_file(setup: tuple[Path, Path, str]) -> None:
    project, repo, _ = setup
    commit = commit_files(repo, {"lib/spec.py": "X = 1\n"}, "spec")
    before = (project / "kernels_src/rmsnorm/spec.py").read_bytes()
    proc = add(project, repo, commit, "into=rmsnorm", paths="[helpers/consts.py,lib/spec.py]")
    assert proc.returncode == 2
    assert "kernels_src/rmsnorm/spec.py exists and is not a vendored file" in proc.stderr
    assert (project / "kernels_src/rmsnorm/spec.py").read_bytes() == before
    assert not (project / "kernels_src/rmsnorm/consts.py").exists()
    assert not (project / "kernels_src" / "VENDOR.lock.json").exists()


TINY_RMSNORM = """groups:
  - name: generic
    name_format: 'rmsnorm_{dtype}_{phase}_generic'
    axes:
      dtype: [bf16]
      phase: [infer]
      n: [0]
"""


@pytest.mark.slow
def test_vendored_source_is_digested_and_named_in_output_source_md(tmp_path: Path) -> None:
    """A kernel imports a vendored module: the compile records it, an edit to it rebuilds the row,
    and the output directory's SOURCE.md names the upstream and commit (one row, one target)."""
    project = small_copy(tmp_path / "proj")
    shrink_op(project, "rmsnorm", TINY_RMSNORM)
    run_farm(project, "expand", check=True)
    repo, first = make_upstream(tmp_path)
    add(project, repo, first, "into=rmsnorm", paths="[helpers/consts.py]").check_returncode()
    kernel = project / "kernels_src/rmsnorm/rmsnorm_fwd.py"
    text = kernel.read_text()
    assert "from common.norm_trace import TRACE_M, trace_rows\n" in text
    kernel.write_text(text.replace("from common.norm_trace import TRACE_M, trace_rows\n",
                                   "from common.norm_trace import trace_rows\nfrom rmsnorm.consts import TRACE_M\n", 1))

    run_farm(project, "build", "targets=[gfx942]", check=True)
    out = project / "outputs/rmsnorm/gfx942"
    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = manifest["objects"]
    assert "rmsnorm/consts.py" in entry["inputs"]["sources"]
    source_md = (out / "SOURCE.md").read_text()
    assert "## Vendored sources (kernels_src/VENDOR.lock.json)\n" in source_md
    assert (f"- `kernels_src/rmsnorm/consts.py`: synth `helpers/consts.py` at commit {first} ({URL}, MIT; "
            "local modifications: none)\n") in source_md
    proc = run_farm(project, "check", "targets=[gfx942]")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    vendored = project / "kernels_src/rmsnorm/consts.py"
    vendored.write_text(vendored.read_text() + "# a local comment\n")
    proc = run_farm(project, "plan", "targets=[gfx942]", check=True)
    assert "source kernels_src/rmsnorm/consts.py changed" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "rows=1 up_to_date=0 to_build=1"


def test_several_upstreams_and_a_reverted_modification(setup: tuple[Path, Path, str], tmp_path: Path) -> None:
    project, repo, first = setup
    add(project, repo, first, paths="[helpers/consts.py]")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    other_commit = commit_files(other, {"LICENSE": MIT, "k.py": "K = 1\n"}, "other")
    proc = vendor(project, "add", f"from={other}", f"commit={other_commit}", "upstream=other", "paths=[k.py]")
    assert proc.returncode == 0, proc.stderr
    assert "# repository: " + str(other) + "\n" in (project / "kernels_src/vendor/other/k.py").read_text()

    proc = vendor(project, "diff", f"from={repo}")
    assert proc.returncode == 2
    assert "files are vendored from several upstreams (other, synth); which one is from=?" in proc.stderr
    proc = vendor(project, "diff", f"from={other}", "upstream=other")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("clean                    kernels_src/vendor/other/k.py\n1 file(s): 1 clean\n")

    path = project / CONSTS_REL
    original = path.read_text()
    path.write_text(original.replace("TRACE_M = 4", "TRACE_M = 8"))
    vendor(project, "note", f"path={CONSTS_REL}", "why=eight", f"from={repo}").check_returncode()
    path.write_text(path.read_text().replace("TRACE_M = 8", "TRACE_M = 4"))
    proc = vendor(project, "diff", f"from={repo}", "upstream=synth", "--strict")
    assert proc.returncode == 0, proc.stdout
    gone = "  note: recorded modification no longer present: eight\n"
    assert f"clean                    {CONSTS_REL}\n{gone}" in proc.stdout
    assert "vendor add|diff|note" in run_farm(project, "--help").stdout


# ------------------------------------------------------------------------------- per-file licenses

APACHE = ("\n                                 Apache License\n                           Version 2.0, January 2004\n"
          "                        http://www.apache.org/licenses/\n")
# No SPDX line: the license file in its own directory (apache/LICENSE) covers it, not the root's MIT.
APACHE_KERNEL = '"""A kernel helper under the Apache license of its directory."""\n\nBLOCK = 128\n'
TAGGED_APACHE = "# SPDX-License-Identifier: Apache-2.0\nWAVES = 4\n"
APACHE_REL = "kernels_src/vendor/synth/apache/block.py"


def mixed_upstream(where: Path) -> tuple[Path, str]:
    """Root LICENSE: MIT; apache/LICENSE: Apache-2.0; helpers/consts.py says MIT in its own SPDX line,
    lib/waves.py says Apache-2.0 in its own (under the root MIT license)."""
    repo, _ = make_upstream(where)
    return repo, commit_files(repo, {"apache/LICENSE": APACHE, "apache/block.py": APACHE_KERNEL,
                                     "lib/waves.py": TAGGED_APACHE}, "apache parts")


def licenses_md_groups(project: Path) -> dict[str, str]:
    """THIRD_PARTY_LICENSES.md split into its `## <license>` groups."""
    text = (project / "THIRD_PARTY_LICENSES.md").read_text()
    parts = text.split("\n## ")[1:]
    return {part.split("\n", 1)[0]: part for part in parts}


def assert_everywhere(project: Path, rel: str, license_id: str) -> None:
    """The lock, the file's header, its SOURCE.md row and THIRD_PARTY_LICENSES.md agree on one file's license."""
    lock = json.loads((project / "kernels_src/VENDOR.lock.json").read_text())
    key = rel.removeprefix("kernels_src/")
    assert lock["files"][key]["license"]["id"] == license_id
    assert f"\n# license: {license_id}\n" in (project / rel).read_text()
    row = next(x for x in (project / "kernels_src/vendor/SOURCE.md").read_text().splitlines()
               if x.startswith(f"| `{key.removeprefix('vendor/')}` |"))
    assert f"| {license_id} |" in row
    groups = licenses_md_groups(project)
    assert [name for name, body in groups.items() if f"`{rel}`" in body] == [license_id]


def test_vendor_add_keeps_each_files_licence(tmp_path: Path) -> None:
    """Before: the upstream had one license, and the latest add relabelled every earlier file with it."""
    project = copy_project(tmp_path / "proj")
    repo, commit = mixed_upstream(tmp_path)
    proc = add(project, repo, commit, paths="[apache/block.py]")
    assert proc.returncode == 0, proc.stderr
    assert "license: Apache-2.0 (text from apache/LICENSE)\n" in proc.stdout
    assert_everywhere(project, APACHE_REL, "Apache-2.0")

    proc = add(project, repo, commit, paths="[kernels/util.py]")  # covered by the root MIT LICENSE
    assert proc.returncode == 0, proc.stderr
    assert "license: MIT (text from LICENSE)\n" in proc.stdout
    assert_everywhere(project, APACHE_REL, "Apache-2.0")
    assert_everywhere(project, UTIL_REL, "MIT")
    groups = licenses_md_groups(project)
    assert APACHE.strip("\n") in groups["Apache-2.0"] and MIT.rstrip("\n") in groups["MIT"]
    assert (project / "kernels_src/vendor/synth/apache/LICENSE").read_text() == APACHE
    proc = vendor(project, "diff", f"from={repo}", "--strict")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.endswith("2 file(s): 2 clean\n")

    # Upstream's root LICENSE text changes. Re-adding util.py there leaves the text consts.py (still at the
    # old commit) uses alone; once consts.py moves too, both share the new copy and the old one is removed.
    add(project, repo, commit, paths="[helpers/consts.py]").check_returncode()
    later = commit_files(repo, {"LICENSE": MIT.replace("2024", "2025")}, "new year")
    add(project, repo, later, paths="[kernels/util.py]").check_returncode()
    texts = {rel: rec["license"]["text"] for rel, rec in
             json.loads((project / "kernels_src/VENDOR.lock.json").read_text())["files"].items()}
    versioned = f"vendor/synth/LICENSE.{later[:12]}"
    assert texts == {"vendor/synth/helpers/consts.py": "vendor/synth/LICENSE",
                     "vendor/synth/kernels/util.py": versioned,
                     "vendor/synth/apache/block.py": "vendor/synth/apache/LICENSE"}
    assert (project / "kernels_src/vendor/synth/LICENSE").read_text() == MIT
    assert (project / "kernels_src" / versioned).read_text() == MIT.replace("2024", "2025")
    add(project, repo, later, paths="[helpers/consts.py]").check_returncode()
    lock = json.loads((project / "kernels_src/VENDOR.lock.json").read_text())
    assert lock["files"]["vendor/synth/helpers/consts.py"]["license"]["text"] == versioned
    assert sorted(lock["license_texts"]) == sorted(["vendor/synth/apache/LICENSE", versioned])
    assert not (project / "kernels_src/vendor/synth/LICENSE").exists()
    for rel in (CONSTS_REL, UTIL_REL):
        assert_everywhere(project, rel, "MIT")
    assert_everywhere(project, APACHE_REL, "Apache-2.0")
    assert "Copyright (c) 2024" not in licenses_md_groups(project)["MIT"]


def test_one_upstream_mixing_licences_in_one_add(tmp_path: Path) -> None:
    """Before: files with different SPDX lines were refused, and untagged ones got the root license."""
    project = copy_project(tmp_path / "proj")
    repo, commit = mixed_upstream(tmp_path)
    proc = add(project, repo, commit, paths="[helpers/consts.py,apache/block.py,lib/waves.py,kernels/util.py]")
    assert proc.returncode == 0, proc.stderr
    assert ("license: Apache-2.0 (text from apache/LICENSE): apache/block.py, lib/waves.py\n"
            "license: MIT (text from LICENSE): helpers/consts.py, kernels/util.py\n") in proc.stdout
    lock = json.loads((project / "kernels_src/VENDOR.lock.json").read_text())
    assert {rel: rec["license"] for rel, rec in lock["files"].items()} == {
        "vendor/synth/helpers/consts.py": {"id": "MIT", "declared_by": "SPDX-License-Identifier",
                                           "text": "vendor/synth/LICENSE"},
        "vendor/synth/kernels/util.py": {"id": "MIT", "declared_by": "LICENSE", "text": "vendor/synth/LICENSE"},
        "vendor/synth/apache/block.py": {"id": "Apache-2.0", "declared_by": "apache/LICENSE",
                                         "text": "vendor/synth/apache/LICENSE"},
        # Its own SPDX line wins over the root MIT license; its text is the Apache one upstream ships.
        "vendor/synth/lib/waves.py": {"id": "Apache-2.0", "declared_by": "SPDX-License-Identifier",
                                      "text": "vendor/synth/apache/LICENSE"}}
    for rel in (CONSTS_REL, UTIL_REL):
        assert_everywhere(project, rel, "MIT")
    for rel in (APACHE_REL, "kernels_src/vendor/synth/lib/waves.py"):
        assert_everywhere(project, rel, "Apache-2.0")
    groups = licenses_md_groups(project)
    assert sorted(groups) == ["Apache-2.0", "MIT"]
    assert APACHE.strip("\n") in groups["Apache-2.0"] and "Permission is hereby granted" not in groups["Apache-2.0"]
    assert MIT.rstrip("\n") in groups["MIT"] and "Apache License" not in groups["MIT"]

    # A license= that contradicts a file's own SPDX line is refused, and nothing is written.
    before = (project / "kernels_src/VENDOR.lock.json").read_bytes()
    proc = add(project, repo, commit, "license=MIT", paths="[lib/waves.py]")
    assert proc.returncode == 2
    assert "license=MIT contradicts lib/waves.py at commit" in proc.stderr and "says Apache-2.0" in proc.stderr
    assert (project / "kernels_src/VENDOR.lock.json").read_bytes() == before


def test_vendor_diff_strict_flags_a_licence_change(tmp_path: Path) -> None:
    """Before: a file labelled MIT in the lock and its header while upstream says Apache-2.0 diffed clean."""
    project = copy_project(tmp_path / "proj")
    repo, commit = mixed_upstream(tmp_path)
    add(project, repo, commit, paths="[apache/block.py,kernels/util.py]").check_returncode()

    # The lock and header as the one-license-per-upstream version left them: block.py relabelled MIT.
    lock_path = project / "kernels_src/VENDOR.lock.json"
    clean_lock, clean_file = lock_path.read_text(), (project / APACHE_REL).read_text()
    lock = json.loads(clean_lock)
    lock["files"]["vendor/synth/apache/block.py"]["license"]["id"] = "MIT"
    lock_path.write_text(json.dumps(lock))
    (project / APACHE_REL).write_text(clean_file.replace("# license: Apache-2.0\n", "# license: MIT\n"))
    flagged = (f"LICENSE CHANGED          {APACHE_REL}: the lock says MIT; upstream at the pinned commit {commit} "
               "says Apache-2.0 (its apache/LICENSE)\n")
    proc = vendor(project, "diff", f"from={repo}")
    assert proc.returncode == 0, proc.stdout  # reported; only strict fails on it
    assert flagged in proc.stdout
    assert proc.stdout.endswith("2 file(s): 2 clean; 1 with a license that disagrees with the lock\n")
    proc = vendor(project, "diff", f"from={repo}", "strict=true")
    assert proc.returncode == 1, proc.stdout
    assert flagged in proc.stdout
    assert "FAIL: 1 file(s) have a license that upstream or their header states otherwise than the lock" \
        in proc.stdout

    # Re-adding records upstream's license again; then a header edited by hand is flagged too.
    add(project, repo, commit, "force=true", paths="[apache/block.py]").check_returncode()
    assert_everywhere(project, APACHE_REL, "Apache-2.0")
    assert vendor(project, "diff", f"from={repo}", "--strict").returncode == 0
    text = (project / APACHE_REL).read_text()
    (project / APACHE_REL).write_text(text.replace("# license: Apache-2.0\n", "# license: MIT\n"))
    proc = vendor(project, "diff", f"from={repo}", "--strict")
    assert proc.returncode == 1
    assert f"LICENSE CHANGED          {APACHE_REL}: the lock says Apache-2.0; its header says MIT\n" in proc.stdout
    (project / APACHE_REL).write_text(text)

    # Upstream relicenses util.py after the pin: the moved checkout's license differs from the lock's.
    later = commit_files(repo, {"kernels/util.py": "# SPDX-License-Identifier: BSD-3-Clause\n" + UTIL}, "relicense")
    proc = vendor(project, "diff", f"from={repo}", "--strict")
    assert proc.returncode == 1, proc.stdout
    assert (f"LICENSE CHANGED          {UTIL_REL}: the lock says MIT; upstream at the checkout's commit {later} "
            "says BSD-3-Clause (its SPDX-License-Identifier)\n") in proc.stdout


# ------------------------------------------------------------------------------- import closure

USES = '''"""Imports of every kind: found ones, missing ones, optional ones."""
import json
from typing import TYPE_CHECKING

import yaml
from flydsl.expr import rocdl
from synth_helpers import pack
from . import siblings
from .util import clamp

try:
    import not_installed_optional
except ImportError:
    not_installed_optional = None
if TYPE_CHECKING:
    import only_for_type_checkers


def late():
    import nosuch.deep
'''


def test_add_names_imports_neither_vendored_nor_installed(setup: tuple[Path, Path, str]) -> None:
    """Before: the add succeeded and every compile of the family failed later on the missing imports."""
    project, repo, _ = setup
    commit = commit_files(repo, {"kernels/uses.py": USES}, "uses")
    proc = add(project, repo, commit, "into=synthfam", paths="[kernels/uses.py,kernels/util.py]")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.splitlines() == [
        "farm vendor: error: 3 module(s) imported by the vendored files are neither vendored nor installed "
        "(kernels_src/ is first on the compile's sys.path):",
        "  - synth_helpers: imported by kernels_src/synthfam/uses.py:7 (upstream kernels/uses.py); upstream has no "
        "file for it",
        "  - synthfam.siblings: imported by kernels_src/synthfam/uses.py:8 (upstream kernels/uses.py); upstream has "
        "no file for it",
        "  - nosuch.deep: imported by kernels_src/synthfam/uses.py:20 in late() (upstream kernels/uses.py); upstream "
        "has no file for it",
        "  fix: first write a module of your own at kernels_src/synth_helpers.py, kernels_src/synthfam/siblings.py, "
        "kernels_src/nosuch/deep.py (or install them into the farm's environment); an import inside a function the "
        "compile never calls (host-only code) can be a stand-in of your own at that path (docs/adding-a-family.md, "
        "section 4)"]
    assert not (project / "kernels_src/VENDOR.lock.json").exists()
    assert not (project / "kernels_src/synthfam").exists()

    # The project provides synth_helpers itself; siblings.py comes along but imports something missing in turn,
    # and upstream's own file for it is named, with an add that brings it (a folder of its own: base=[lib]).
    (project / "kernels_src/synth_helpers.py").write_text("def pack(x):\n    return x\n")
    commit = commit_files(repo, {"kernels/uses.py": USES.replace("\n\ndef late():\n    import nosuch.deep\n", "\n"),
                                 "kernels/siblings.py": "from gone_too import x\n", "lib/gone_too.py": "x = 1\n"},
                          "siblings")
    paths = "[kernels/uses.py,kernels/util.py,kernels/siblings.py]"
    proc = add(project, repo, commit, "into=synthfam", paths=paths)
    assert proc.returncode == 2, proc.stdout
    first = f"farm vendor add from={repo} commit={commit} upstream=synth base=[lib] paths=[lib/gone_too.py]"
    assert proc.stderr.splitlines()[1:] == [
        "  - gone_too: imported by kernels_src/synthfam/siblings.py:1 (upstream kernels/siblings.py); upstream has "
        "lib/gone_too.py",
        f"  fix: vendor upstream's files at the import paths the code uses: {first}; then run this add again"]
    # The fix works as told.
    proc = vendor(project, *first.split()[2:])
    assert proc.returncode == 0, proc.stderr
    assert (project / "kernels_src/gone_too.py").is_file()
    proc = add(project, repo, commit, "into=synthfam", paths=paths)
    assert proc.returncode == 0, proc.stderr
    assert (project / "kernels_src/synthfam/siblings.py").is_file()


NESTED = {"src/pkg/ops/kernel_a.py": "from pkg.common.tiles import TILE\nfrom pkg.common import shapes\n",
          "src/pkg/ops/kernel_b.py": "from pkg.common.tiles import TILE\n\n\ndef host():\n    import pkg.bench.timer\n",
          "src/pkg/common/tiles.py": "TILE = 64\n", "src/pkg/common/shapes.py": "from .tiles import TILE\n",
          "src/pkg/bench/timer.py": "import gpu_stopwatch\n"}


def test_missing_imports_across_folders_name_each_module_once_with_an_add_that_works(
        setup: tuple[Path, Path, str]) -> None:
    """Upstream's kernels import its package by absolute name across folders (ops/, common/, bench/): each
    missing module is one line naming all its importers, and the fix is one add (base=) that puts every file
    at its import path. Before: one line per import (pkg.common.tiles twice), and a fix of one into= per
    folder, which no single add can give and separate adds each fail."""
    project, repo, _ = setup
    commit = commit_files(repo, NESTED, "nested package")
    proc = add(project, repo, commit, "into=pkg", paths="[src/pkg/ops/kernel_a.py,src/pkg/ops/kernel_b.py]")
    assert proc.returncode == 2, proc.stdout
    one = (f"farm vendor add from={repo} commit={commit} upstream=synth base=[src] paths=[src/pkg/ops/kernel_a.py,"
           "src/pkg/ops/kernel_b.py,src/pkg/common/tiles.py,src/pkg/common/shapes.py,src/pkg/bench/timer.py]")
    assert proc.stderr.splitlines() == [
        "farm vendor: error: 3 module(s) imported by the vendored files are neither vendored nor installed "
        "(kernels_src/ is first on the compile's sys.path):",
        "  - pkg.common.tiles: imported by kernels_src/pkg/kernel_a.py:1 (upstream src/pkg/ops/kernel_a.py), "
        "kernels_src/pkg/kernel_b.py:1 (upstream src/pkg/ops/kernel_b.py); upstream has src/pkg/common/tiles.py",
        "  - pkg.common: imported by kernels_src/pkg/kernel_a.py:2 (upstream src/pkg/ops/kernel_a.py); "
        "upstream has src/pkg/common/shapes.py",
        "  - pkg.bench.timer: imported by kernels_src/pkg/kernel_b.py:5 in host() (upstream src/pkg/ops/kernel_b.py); "
        "upstream has src/pkg/bench/timer.py",
        "  fix: first write a module of your own at kernels_src/gpu_stopwatch.py (or install it into the farm's "
        "environment); then vendor upstream's files at the import paths the code uses (base= keeps each file's "
        f"path below that folder): {one}; an import inside a function the compile never calls (host-only code) can "
        "be a stand-in of your own at that path (docs/adding-a-family.md, section 4)"]
    assert not (project / "kernels_src/pkg").exists()

    # The fix, as told, passes: upstream's layout below src/ is kept.
    (project / "kernels_src/gpu_stopwatch.py").write_text('"""Stand-in: benchmarks never run in a compile."""\n')
    proc = vendor(project, *one.split()[2:])
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.relative_to(project / "kernels_src/pkg").as_posix()
                  for p in (project / "kernels_src/pkg").rglob("*.py")) == [
        "bench/timer.py", "common/shapes.py", "common/tiles.py", "ops/kernel_a.py", "ops/kernel_b.py"]


@pytest.mark.parametrize("args, message", [
    (("base=[src/pkg/ops]", "paths=[src/pkg/common/tiles.py]"),
     "paths: src/pkg/common/tiles.py is below none of base=[src/pkg/ops]"),
    (("base=[../src]", "paths=[src/pkg/common/tiles.py]"), "not a relative path inside the upstream repository"),
    (("base=[src/pkg/ops,src/pkg]", "paths=[src/pkg/ops/kernel_a.py,src/pkg/common/tiles.py]"),
     "imported by the vendored files are neither vendored nor installed"),
])
def test_bad_base_is_one_clear_error(setup: tuple[Path, Path, str], args: tuple[str, ...], message: str) -> None:
    project, repo, _ = setup
    commit = commit_files(repo, NESTED, "nested package")
    proc = vendor(project, "add", f"from={repo}", f"commit={commit}", "upstream=synth", *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (project / "kernels_src/VENDOR.lock.json").exists()


def test_recorded_repository_is_kept_on_an_add_from_another_clone(setup: tuple[Path, Path, str],
                                                                    tmp_path: Path) -> None:
    """Before: an add from a local clone of the same upstream replaced the recorded URL with the clone's origin
    (a path) in the lock, every header and SOURCE.md. Provenance changes only with url=; a checkout of
    another project is refused."""
    project, repo, first = setup
    assert add(project, repo, first).returncode == 0
    written = {rel: (project / rel).read_text() for rel in (CONSTS_REL, UTIL_REL, "kernels_src/vendor/SOURCE.md",
                                                             "THIRD_PARTY_LICENSES.md")}
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    second = commit_files(clone, {"helpers/consts.py": CONSTS.replace("x * 2", "x * 3")}, "second")

    proc = add(project, clone, second, paths="[helpers/consts.py]")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"kept synth's recorded repository {URL} (the checkout's origin is {repo}; "
                                  "url= changes it)\n")
    lock = json.loads((project / "kernels_src/VENDOR.lock.json").read_text())
    assert lock["upstreams"]["synth"] == {"url": URL}
    assert f"# repository: {URL}\n" in (project / CONSTS_REL).read_text()
    assert (project / UTIL_REL).read_text() == written[UTIL_REL]
    assert f"synth ({URL})" in (project / "kernels_src/vendor/SOURCE.md").read_text()
    assert str(repo) not in (project / "THIRD_PARTY_LICENSES.md").read_text()

    # Another project under the same upstream name: refused, nothing written.
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    git(other, "remote", "add", "origin", "https://example.invalid/other.git")
    third = commit_files(other, {"helpers/consts.py": CONSTS}, "other project")
    before = {p: p.read_bytes() for p in (project / "kernels_src").rglob("*") if p.is_file()}
    proc = add(project, other, third, paths="[helpers/consts.py]")
    assert proc.returncode == 2
    commits = ", ".join(c[:12] for c in sorted([first, second]))
    assert (f"from={other} (origin https://example.invalid/other.git) is not upstream synth's recorded repository "
            f"{URL}: it holds none of the commits vendored from synth ({commits})") in proc.stderr, proc.stderr
    assert "say so with url=https://example.invalid/other.git" in proc.stderr
    assert before == {p: p.read_bytes() for p in (project / "kernels_src").rglob("*") if p.is_file()}

    # The user says the upstream moved: url= records it, in the lock and every header of that upstream.
    proc = add(project, clone, second, f"url={URL}-moved", paths="[helpers/consts.py]")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"repository of synth: {URL} -> {URL}-moved (url=)\n")
    assert json.loads((project / "kernels_src/VENDOR.lock.json").read_text())["upstreams"]["synth"] == {
        "url": f"{URL}-moved"}
    assert f"# repository: {URL}-moved\n" in (project / UTIL_REL).read_text()

"""What the farm's verbs are: one declaration each (name, what it does, its words, its flags, where it runs).

The parser (farm/cli/parser.py) and the top-level help are built from this table, so a verb, a flag or a
line of help is written down once.
"""

from __future__ import annotations

from dataclasses import dataclass

OVERRIDES = "key=value"
OVERRIDES_HELP = ("Hydra overrides, e.g. ops=[rmsnorm] targets=[gfx942,gfx950] dtypes=[bf16] "
                  "names=[NAME] outputs_dir=PATH executor=cluster executor.address=HOST:PORT")
PROGRESS_ENV = "FARM_PROGRESS_INTERVAL_S"
VENDOR_FORMS = ("vendor add from=CHECKOUT commit=SHA upstream=NAME paths=[PATH,...] [into=DIR] [base=[DIR,...]]\n"
                "           [url=URL] [license=SPDX] [license_file=PATH] [force=true]\n"
                "vendor diff from=CHECKOUT [pinned=true] [strict=true]\n"
                "vendor note path=FILE why=\"REASON\" from=CHECKOUT   (record a local modification)")


@dataclass(frozen=True)
class Flag:
    """A boolean flag of one verb: its spellings (the long one is its name) and its help."""

    names: tuple[str, ...]
    help: str

    @property
    def name(self) -> str:
        return self.names[-1]


@dataclass(frozen=True)
class Verb:
    """One verb: `run` is "module:function" (imported only when the verb runs, see app.dispatch)."""

    name: str
    run: str
    summary: str
    words: str = OVERRIDES
    words_help: str = OVERRIDES_HELP
    flags: tuple[Flag, ...] = ()
    details: str = ""
    listing: str = ""  # extra lines under the verb in `farm --help`
    heading: str = ""  # how `farm --help` names it, when not just its name


VERBS: tuple[Verb, ...] = (
    Verb("expand", "farm.cli.table_cmds:cmd_expand", "conf/ -> instances/ (--check: exit 1 if instances/ is stale)",
         flags=(Flag(("--check",), "write nothing; exit 1 when instances/ differs from what conf/ expands to"),)),
    Verb("plan", "farm.cli.table_cmds:cmd_plan",
         "which selected rows are up to date and which would build, and why",
         details="-v lists every selected row, not only those that would build. Exit 1 when the installed "
                 "toolchain differs from the pin (each difference is a TOOLCHAIN line; farm build would refuse)."),
    Verb("build", "farm.cli.build_cmds:cmd_build",
         "compile what must build (Ray), verify, write outputs/ and manifests",
         details="Progress goes to stderr: a bar on a terminal; otherwise one line about every 10 s (done/total, "
                 f"rate, ETA, the slowest row in flight); {PROGRESS_ENV}=SECONDS sets that interval."),
    Verb("check", "farm.cli.assure_cmds:cmd_check",
         "drift guard: re-derive every selected object, manifest and digest",
         flags=(Flag(("--complete",), "exit 1 also when a selected row is not built (a tree meant to be the "
                                      "whole table, as after a full build)"),),
         details="Compares every selected object that exists with its manifest entry (re-derived from its bytes: "
                 "target, e_flags, instruction classes, input digests) and with its golden digest in "
                 "outputs.sha256; a directory's manifest.json and SOURCE.md are compared with outputs.sha256 "
                 "only when the directory holds every row of its table.\n"
                 "DRIFT <file>: something that exists differs from what the farm would write or from the golden "
                 "digest, or its inputs changed since it was built. Any DRIFT line: exit 1.\n"
                 "NOT BUILT <dir>/: selected rows with no object and no manifest entry (never built, or their "
                 "build failed), one line per directory; -v lists the rows. Not drift: exit 0, unless "
                 "--complete.\n"
                 "The last line says what was compared, the verdict, and how many rows are not built with the "
                 "`farm build` that builds them."),
    Verb("audit", "farm.cli.assure_cmds:cmd_audit",
         "rebuild the selection elsewhere, varied; compare byte-for-byte with outputs/",
         listing="(audit.sample=N for a deterministic sample; audit.vary.umask=false etc.)"),
    Verb("emulate", "farm.cli.assure_cmds:cmd_emulate",
         "run the selected objects on the ISA models (Ray tasks); compare with numpy references",
         flags=(Flag(("--ci-sample",), "only CI's sample of the selection: one object per family x target x dtype "
                                       "form the models run (farm/emulate/sample.py)"),),
         details="Instruction-level models of the ISAs, not hardware; the objects run as tasks on the executor "
                 "(executor=local: a private loopback Ray cluster; executor=cluster executor.address=...). Each "
                 "object is within, OUTSIDE, or NOT EMULATED with the reason (no check for its family, no model "
                 "of its target, not built, stopped by the model). Then a table by family and target. Last "
                 "line: emulated=N within=W outside=O not_emulated=X max_err=E; exit 0 only when every selected "
                 "object was emulated and is within."),
    Verb("pin", "farm.cli.build_cmds:cmd_pin",
         "move the toolchain pin to what is installed (rebuilds everything)"),
    Verb("golden", "farm.cli.publish_cmds:cmd_golden",
         "record outputs.sha256 (+ outputs.dvc) from a complete, clean tree; commit them",
         details="ops=[A,B] replaces the lines of A and B and keeps every other line; outputs.dvc is written only "
                 "when outputs/ is the whole table and exactly what outputs.sha256 records."),
    Verb("push", "farm.cli.publish_cmds:cmd_push", "publish outputs/ with DVC (after farm check)",
         flags=(Flag(("--partial",), "publish outputs/ although it lacks directories of the table (the published "
                                     "listing lacks them; outputs.sha256 keeps their lines)"),),
         details="-v lists every name where a report gives the first few."),
    Verb("pull", "farm.cli.publish_cmds:cmd_pull", "fetch outputs/ with DVC and check it",
         flags=(Flag(("--force",), "replace local changes in outputs/ with the published copy, removing files it "
                                   "lacks (only once every published file is in hand and verified)"),),
         details="Nothing in outputs/ changes unless the listing and every file of outputs.dvc are in the local "
                 "DVC cache and verify. -v lists every name where a report gives the first few."),
    Verb("status", "farm.cli.publish_cmds:cmd_status",
         "does outputs/ match outputs.dvc and the instance table? the fixing command",
         details="-v adds a line for every directory that matches."),
    Verb("cluster", "farm.cli.cluster_cmds:cmd_cluster",
         "a standing local Ray cluster with warm compilers, used by every build while it is up",
         words="up|down|status [key=value ...]", words_help="the action, then Hydra overrides (executor.num_cpus=N)",
         listing="(saves each build the Ray start and the workers' warm-up)", heading="cluster up|down|status"),
    Verb("diff", "farm.cli.assure_cmds:cmd_diff",
         "compare two code objects: header, sections, notes, kernel metadata, .text",
         words="A.hsaco B.hsaco", words_help="the two code objects",
         flags=(Flag(("--json",), "print the comparison as JSON"),),
         details="Exit 0 when identical, 1 when they differ."),
    Verb("vendor", "farm.cli.vendor_cmds:cmd_vendor",
         "upstream sources in kernels_src/ with recorded provenance (docs/vendoring.md)",
         words="add|diff|note key=value ...", words_help="the sub-verb and its plain key=value options "
                                                         "(not Hydra overrides)",
         details=f"{VENDOR_FORMS}\nFlags: --pinned, --strict, --force stand for pinned=true, strict=true, force=true.",
         listing=VENDOR_FORMS, heading="vendor add|diff|note"),
)
BY_NAME = {verb.name: verb for verb in VERBS}
# `farm vendor` hands its flags to the vendoring tool, which knows which of them each sub-verb takes.
PASS_FLAGS_THROUGH = frozenset({"vendor"})


def listing() -> str:
    """The verbs part of `farm --help`."""
    lines = []
    for verb in VERBS:
        head = verb.heading or verb.name
        lines.append(f"  {head:9} {verb.summary}" if len(head) <= 9 else f"  {head}  {verb.summary}")
        lines += [f"{'':12}{extra}" for extra in verb.listing.splitlines()]
    return "\n".join(lines)

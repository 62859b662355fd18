"""The commands and snippets the documentation shows, read as a reader would paste them.

`shell_commands()` runs every fenced ```bash block of README.md and docs/*.md in one bash
process, page by page (`set -u`; each page's variables carry from block to block, as in one
terminal), where no program can run: `PATH` is empty, the working directory is a scratch folder
that holds recording stubs for `.venv/bin/python` and the files of `scripts/` and
`benchmarks/`, and bash's `command_not_found_handle` records everything else. Bash itself does
the expansion (variables, quotes, loops, word splitting), so each record is the argv the program
would get. Variables a page uses without setting come from `PLACEHOLDERS`; a variable missing
from both stops the page (`unbound variable`), which the caller reports.

`hydra_jobs()` turns an entry script's overrides into the jobs Hydra would compose: the run;
for `-m`, the sweep of `hydra.sweeper.params` and the command line as Hydra's basic sweeper
sweeps it, as its first job and one job per further swept value.

`script_problem()` says why a documented `scripts/` or `benchmarks/` command would not start:
a missing file, or arguments the script's own argparse parser refuses (its `main()` run up to
its `parse_args`, which parses the documented arguments and stops it there).
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY_SCRIPTS = ("train.py", "index.py", "evaluate.py", "serve.py")

# The placeholders of the pages, in one table. `$NAME`: a shell variable a page uses without
# setting it (README's `$FW`; one a page sets, `$D`, `$S`, `$G`, ..., comes from the page),
# with the value the commands are read with. `NAME`: a word that stands for a folder or file
# the reader makes or names (`RUN/hf_model`), left as written (a Hydra value or a script
# argument either way), with what makes it. A variable set nowhere stops its page
# (tests/test_docs.py names it); a name here that no page uses fails too.
PLACEHOLDERS = {
    "$FW": "corpus=factoid-wiki corpus.sources.passage.path=/data/fw/factoid-wiki-passage "
    "corpus.sources.sentence.path=/data/fw/factoid-wiki-sentence "
    "corpus.sources.proposition.path=/data/fw/factoid-wiki",  # docs/cluster.md, step 1
    "RUN": "a train.py run folder: hydra.run.dir=RUN (RUN2, RUN4 and DIST likewise)",
    "HELD": "python scripts/heldout_split.py --out HELD (tests/test_docs.py checks its paths)",
    "DIR": "a folder the reader names: a dataset on disk, or a paths.cache_dir",
    "CACHE": "a paths.cache_dir",
    "SQ": "the folder of several sweeps (hydra.sweep.dir=SQ/<name>)",
    "DISTILL": "scripts/distill_targets.py --held HELD --out DISTILL (DISTILL/<source>/...)",
    "SHORTLIST": "python scripts/copy_shortlist.py --out SHORTLIST",
    "PASSAGES": "a pyserini JSONL file or folder of passages",
    "PROPOSITIONS": "a pyserini JSONL file or folder of propositions",
    "DATE": "the <date>_<time> folder of a multirun",
}
SHELL_PLACEHOLDERS = {k[1:]: v for k, v in PLACEHOLDERS.items() if k.startswith("$")}

# `sudo X`, `flock LOCK X`, `nice X`: the command is X
PREFIXES = {"sudo": 0, "flock": 1, "nice": 0, "time": 0}


def doc_pages() -> list[Path]:
    """README.md and every page under docs/, in a fixed order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def fenced_blocks(text: str, lang: str) -> list[tuple[int, str]]:
    """(first line number, body) of each ```lang block of a Markdown text."""
    pattern = rf"^```{re.escape(lang)}[ \t]*\n(.*?)^```[ \t]*$"
    return [
        (text.count("\n", 0, m.start()) + 2, m.group(1))
        for m in re.finditer(pattern, text, flags=re.M | re.S)
    ]


@dataclass(frozen=True)
class Command:
    """One command a page shows: where (`page:line` of its block) and its argv."""

    at: str
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.at}: {' '.join(self.argv)}"[:400]


STUB = '#!/bin/bash\nprintf "%s\\0" @@CMD "$DOC_AT" "$0" "$@" >&3\n'
# `kill` a no-op: a page's `kill %1` must not stop its background command before it records
PRELUDE = """\
exec 3>"$DOC_RECORDS"
command_not_found_handle() { printf '%s\\0' @@CMD "$DOC_AT" "$@" >&3; return 0; }
kill() { return 0; }
"""


def _stub_tree(root: Path) -> None:
    """Recording stubs for what a page runs by its path (relative to the repository)."""
    paths = [".venv/bin/python"]
    for folder in ("scripts", "benchmarks"):
        paths += [rel(p) for p in (REPO / folder).iterdir() if p.is_file()]
    for path in paths:
        stub = root / path
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(STUB)
        stub.chmod(0o755)


def page_script(page: Path) -> str:
    """The page's bash blocks as one subshell that ends by recording the page done. A command
    sent to the background (`python serve.py ... &`) is waited for before the next command runs
    (`trap wait DEBUG`), so the records come in the page's order however busy the machine is
    (each pytest-xdist worker reads the pages and must collect the same tests)."""
    lines = [
        "( set -u",
        "trap wait DEBUG",
        *(f"export {k}={shlex.quote(v)}" for k, v in SHELL_PLACEHOLDERS.items()),
    ]
    for line, body in fenced_blocks(page.read_text(encoding="utf-8"), "bash"):
        lines += [f"export DOC_AT={rel(page)}:{line}", body]
    lines += [f"wait; printf '%s\\0' @@END {rel(page)} >&3", ")"]
    return "\n".join(lines)


@dataclass
class ShellRun:
    commands: list[Command]
    finished: set[str]  # pages whose blocks all ran (no syntax error, no unset variable)
    stderr: str


@functools.cache
def shell_commands(pages: tuple[Path, ...] | None = None) -> ShellRun:
    """Every command of the pages' bash blocks, expanded by bash; see the module's docstring."""
    pages = tuple(doc_pages()) if pages is None else pages
    with tempfile.TemporaryDirectory(prefix="doc-shell-") as tmp:
        root = Path(tmp)
        (root / "nobin").mkdir()
        (root / "cwd").mkdir()
        _stub_tree(root / "cwd")
        records = root / "records"
        script = PRELUDE + "\n".join(page_script(p) for p in pages) + "\n"
        env = {"PATH": str(root / "nobin"), "HOME": str(root), "DOC_RECORDS": str(records),
               "LC_ALL": "C.UTF-8"}  # fmt: skip
        done = subprocess.run(["/bin/bash", "-c", script], cwd=root / "cwd", env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        raw = records.read_bytes().decode("utf-8") if records.exists() else ""
    records = []  # [marker, fields...]: a command (@@CMD, where, argv...) or a page done (@@END)
    for field in raw.split("\0")[:-1]:
        if field in ("@@CMD", "@@END"):
            records.append([field])
        else:
            records[-1].append(field)
    return ShellRun(
        [Command(r[1], tuple(r[2:])) for r in records if r[0] == "@@CMD" and len(r) > 2],
        {r[1] for r in records if r[0] == "@@END"},
        done.stderr,
    )


def normalized(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The argv with `sudo`/`flock LOCK`/`nice` dropped and every Python named `python`."""
    argv = tuple(argv)
    while argv and argv[0] in PREFIXES:
        argv = argv[1 + PREFIXES[argv[0]] :]
    if argv and (argv[0] in ("python3", ".venv/bin/python") or argv[0].endswith("/python")):
        argv = ("python", *argv[1:])
    return argv


INLINE = re.compile(r"(?<!`)`((?:python|\.venv/bin/python) [^`]+)`(?!`)")


def inline_commands(pages: tuple[Path, ...] | None = None) -> list[Command]:
    """The `python ...` commands the pages show as inline code (`python train.py ...`), split as
    a shell would; spans with a `<placeholder>` or an interpreter flag (`python -X ...`) are
    prose, not commands."""
    pages = tuple(doc_pages()) if pages is None else pages
    commands = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for m in INLINE.finditer(text):
            argv = shlex.split(m.group(1).replace("\\\n", " "))
            if "<" in m.group(1) or argv[1].startswith("-X"):
                continue
            commands.append(
                Command(f"{rel(page)}:{text.count(chr(10), 0, m.start()) + 1}", tuple(argv))
            )
    return commands


def python_snippets(pages: tuple[Path, ...] | None = None) -> list[tuple[str, str]]:
    """(where, code) of every ```python block and every `python -c CODE` of the bash blocks."""
    pages = tuple(doc_pages()) if pages is None else pages
    snippets = []
    for page in pages:
        for line, body in fenced_blocks(page.read_text(encoding="utf-8"), "python"):
            snippets.append((f"{rel(page)}:{line}", body))
    for cmd in shell_commands(pages).commands:
        argv = normalized(cmd.argv)
        if argv[:2] == ("python", "-c") and len(argv) > 2:
            snippets.append((cmd.at, argv[2]))
    return snippets


# --- Hydra ---------------------------------------------------------------------------------

MULTIRUN_FLAGS = ("-m", "--multirun")


def entry_overrides(argv: tuple[str, ...]) -> tuple[str, bool, list[str]]:
    """(config name, multirun?, overrides) of `python <entry>.py ARGS`, as the entry parses
    them (serve.py's `granularity=a,b` rewritten first); ValueError on a flag Hydra lacks."""
    script, args = argv[1], list(argv[2:])
    if script == "serve.py":
        from densex.pipelines.search.compose import granularity_argv

        args = granularity_argv(args)
    multirun = False
    overrides = []
    for arg in args:
        if arg in MULTIRUN_FLAGS:
            multirun = True
        elif arg.startswith("-"):
            raise ValueError(f"{arg!r}: not a flag the documented commands may use")
        else:
            overrides.append(arg)
    return script.removesuffix(".py"), multirun, overrides


def hydra_jobs(
    name: str, multirun: bool, overrides: list[str], compose
) -> tuple[list[str], list[list[str]]]:
    """The jobs to compose for the command: (the first job, one job per further swept value).

    A run is its overrides. A multirun is swept as Hydra's basic sweeper sweeps it: the
    config's `hydra.sweeper.params` (read from the config the command line composes with each
    of its sweeps at its first value), then the command line (a key on both: the command
    line's); the first job takes every first value, and each further value of a sweep gives
    the first job with that one value changed, so every swept value is composed once.
    `compose(name, overrides)` gives the config with its `hydra` node."""
    if not multirun:
        return overrides, []
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()

    def values(parsed) -> dict[str, list[str]]:
        return {
            o.get_key_element(): (
                [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
                if o.is_sweep_override()
                else [o.input_line]
            )
            for o in parsed
        }

    line = values(parser.parse_overrides(overrides))
    params = compose(name, [v[0] for v in line.values()]).hydra.sweeper.params or {}
    swept = {**values(parser.parse_overrides([f"{k}={v}" for k, v in params.items()])), **line}
    first = [v[0] for v in swept.values()]
    further = [
        [value if o == v[0] else o for o in first] for v in swept.values() for value in v[1:]
    ]
    return first, further


# --- scripts/, benchmarks/, make ---------------------------------------------------------------


def is_script_command(cmd: Command) -> bool:
    """`python scripts/X.py ...`, `python benchmarks/X.py ...`, `bash X.sh`, or a script run by
    its path."""
    argv = normalized(cmd.argv)
    if argv[0] == "python":
        return len(argv) > 1 and argv[1].startswith(("scripts/", "benchmarks/"))
    return argv[0] == "bash" or argv[0].startswith(("scripts/", "benchmarks/"))


@functools.cache
def load_script(path: Path):
    """The script imported as a module (not as `__main__`: its main() does not run)."""
    import importlib.util
    import sys

    name = f"_doc_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does: dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


class _Parsed(Exception):
    pass


def parse_script_args(path: Path, args: list[str]):
    """The Namespace the script's own parser makes of `args`: its main() runs up to its
    `parse_args()` (or `parse_known_args()`), which parses `args` and stops it there, so
    nothing after it runs. SystemExit: the parser refused them (its message on stderr)."""
    import argparse
    import sys
    from unittest import mock

    parse, parse_known = (
        argparse.ArgumentParser.parse_args,
        argparse.ArgumentParser.parse_known_args,
    )
    got = {}

    def intercept(self, _args=None, namespace=None):
        with mock.patch.object(argparse.ArgumentParser, "parse_known_args", parse_known):
            got["ns"] = parse(self, args, namespace)
        raise _Parsed

    def intercept_known(self, _args=None, namespace=None):
        got["ns"] = parse_known(self, args, namespace)
        raise _Parsed

    module = load_script(path)
    with (
        mock.patch.object(argparse.ArgumentParser, "parse_args", intercept),
        mock.patch.object(argparse.ArgumentParser, "parse_known_args", intercept_known),
        mock.patch.object(sys, "argv", [str(path), *args]),
    ):
        try:
            module.main()
        except _Parsed:
            return got["ns"]
    raise AssertionError(f"{rel(path)}: main() returned without parsing its arguments")


def script_problem(argv: tuple[str, ...]) -> str | None:
    """Why the documented script command would not start (None: it would)."""
    import contextlib
    import io
    import os

    if argv[0] == "python":
        path = REPO / argv[1]
        if not path.is_file():
            return f"{argv[1]}: no such file"
        if "--help" in argv[2:] or "-h" in argv[2:]:
            return None
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parse_script_args(path, list(argv[2:]))
        except SystemExit as e:
            return f"its parser refused the arguments (exit {e.code}): {err.getvalue()[-1500:]}"
        return None
    path = REPO / (argv[1] if argv[0] == "bash" else argv[0])
    if not path.is_file():
        return f"{rel(path) if path.is_relative_to(REPO) else path}: no such file"
    if argv[0] != "bash" and not os.access(path, os.X_OK):
        return f"{rel(path)} is run by its path but is not executable"
    return None


def run_script(path: Path, args: list[str]) -> None:
    """The script's main() on `args`, in this process, its output dropped."""
    import contextlib
    import io
    import sys
    from unittest import mock

    with (
        mock.patch.object(sys, "argv", [str(path), *args]),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        load_script(path).main()


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([\w.-]+):(?!=)", text, flags=re.M)) - {".PHONY"}


def make_comment(target: str) -> list[str]:
    """The comment lines right above a Makefile target."""
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}:", line))
    comment = []
    for line in reversed(lines[:start]):
        if not line.startswith("#"):
            break
        comment.insert(0, line)
    return comment


def make_recipe(target: str) -> list[str]:
    """The recipe lines of a Makefile target (tabs stripped, comments kept)."""
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"{re.escape(target)}:", line))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe

"""The README stays a front page, the documentation site stays whole, and the commands the
pages show run as written (fast; no build, no subprocess per command).

The README is at most 250 lines; every page under docs/ is in mkdocs.yml's navigation and
every page the navigation names exists; every link from the README into docs/ names a page
that exists; no page tells the reader to run `huggingface-cli` (huggingface_hub 2.x ships
`hf`) or cites internal issue numbers and session narrative ("this round", "after the fix").
The strict site build itself (`make docs`) runs in CI.

Every fenced ```bash block of README.md and docs/*.md is read as bash reads it, where nothing
can run (tests/helpers/docs.py: its placeholders, `RUN`, `HELD`, `$FW`, ..., are one table
there), with every inline `python ...` command: each entry-script command composes through
Hydra's compose API in this process as the entry would compose it (a multirun, each swept
value), each scripts/ or benchmarks/ command's arguments parse with the script's own parser,
each `make` target exists, each `HELD/...` path is one scripts/heldout_split.py writes, and
`make bench` runs every benchmark with arguments it parses. The pages' Python snippets run
against the demo cache in tests/search/test_docs_snippets.py.
"""

from __future__ import annotations

import copy
import functools
import re
import shlex
from pathlib import Path

import pytest
import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from helpers.config import CONF_DIR
from helpers.docs import (
    ENTRY_SCRIPTS,
    PLACEHOLDERS,
    Command,
    doc_pages,
    entry_overrides,
    hydra_jobs,
    inline_commands,
    is_script_command,
    make_comment,
    make_recipe,
    makefile_targets,
    normalized,
    rel,
    run_script,
    script_problem,
    shell_commands,
)

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README_MAX_LINES = 250


def nav_pages(nav: list) -> list[str]:
    """The page paths of an mkdocs `nav` (nested sections flattened)."""
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def mkdocs_config() -> dict:
    # mkdocs.yml is plain YAML (no !!python tags): safe_load reads it
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/"
    )
    text = "\n".join(lines)
    for must in ("make demo", "make test", "## After `make demo`", "logs/demo/multiruns/"):
        assert must in text, f"README.md lost {must!r}"


def test_every_docs_page_is_in_the_nav_and_every_nav_page_exists() -> None:
    cfg = mkdocs_config()
    assert cfg.get("strict") is True and cfg.get("docs_dir", "docs") == "docs"
    nav = nav_pages(cfg["nav"])
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == on_disk, (
        f"not in mkdocs.yml's nav: {sorted(set(on_disk) - set(nav))}; "
        f"in the nav but missing: {sorted(set(nav) - set(on_disk))}"
    )
    assert len(nav) == len(set(nav)), "a page appears twice in the nav"


def test_readme_links_into_docs_resolve() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links to no docs page"
    missing = sorted({t for t in targets if not (REPO / t).exists()})
    assert not missing, f"README.md links to missing pages: {missing}"
    linked = {t for t in targets if t.endswith(".md")}
    pages = {f"docs/{p}" for p in nav_pages(mkdocs_config()["nav"])}
    assert pages - {"docs/index.md"} <= linked, f"the README's map misses {sorted(pages - linked)}"


# session narrative and internal references a reader who was never here cannot follow
NARRATIVE = re.compile(
    r"\bissues? #?\d+|\bthis (?:round|session)\b|\bnow\b|\b(?:before|after) the (?:fix|change)"
    r"|\bas committed\b|\bthe committed\b|\bissue's\b|\bno longer\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("path", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_pages_speak_to_a_new_reader(path: str) -> None:
    file = REPO / path if path == "README.md" else DOCS / path
    lines = file.read_text(encoding="utf-8").splitlines()
    cli = [i for i, line in enumerate(lines, 1) if "huggingface-cli" in line]
    assert not cli, (
        f"{path}:{cli}: huggingface_hub 2.x ships `hf`, not `huggingface-cli`: use `hf download`"
    )
    narrative = [
        (i, m.group(0)) for i, line in enumerate(lines, 1) for m in NARRATIVE.finditer(line)
    ]
    assert not narrative, f"{path}: internal references or session narrative {narrative}"


# --- the documented commands run (composed, parsed) as written ------------------------------

SHELL = shell_commands()
DOCUMENTED = [*SHELL.commands, *inline_commands()]
ENTRY = [c for c in DOCUMENTED if normalized(c.argv)[0] == "python"
         and normalized(c.argv)[1:2] and normalized(c.argv)[1] in ENTRY_SCRIPTS]  # fmt: skip
SCRIPTS = [c for c in DOCUMENTED if c not in ENTRY and is_script_command(c)]


def ids(commands: list[Command]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for c in commands:
        seen[c.at] = seen.get(c.at, 0) + 1
        out.append(f"{c.at}#{seen[c.at]}")
    return out


def test_every_page_shell_block_runs_through() -> None:
    """Each page's bash blocks parse and use no variable that neither the page nor
    PLACEHOLDERS sets (bash's `set -u`), so every command below was read."""
    pages = {rel(p) for p in doc_pages()}
    last = {c.at.split(":")[0]: c.at for c in SHELL.commands}  # each page's last block read
    stopped = [f"{page} (after the block at {last.get(page, 'its start')})"
               for page in sorted(pages - SHELL.finished)]  # fmt: skip
    assert not stopped, (
        f"stopped early in {stopped}: a shell syntax error, or a variable set nowhere (define "
        f"it on the page or in PLACEHOLDERS):\n{SHELL.stderr[-2000:]}"
    )
    assert len(ENTRY) >= 50 and len(SCRIPTS) >= 8, "the pages lost their commands?"


@pytest.fixture(scope="module", autouse=True)
def hydra_left_clean():
    yield
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()


def hydra_loader():
    """Hydra's config loader over conf/, initialised once for this module's compositions (a
    test elsewhere that composes re-initialises it; then it is initialised again here)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR))
    return GlobalHydra.instance().config_loader()


@functools.cache
def composed_choices(name: str, choices: tuple[str, ...]) -> DictConfig:
    """`conf/<name>.yaml` with these group choices, `hydra` node included (Hydra's compose)."""
    from hydra import compose

    hydra_loader()
    return compose(name, list(choices), return_hydra_config=True)


def composed(name: str, overrides: tuple[str, ...]) -> DictConfig:
    """The config Hydra composes from `overrides`, built as Hydra builds it (the defaults list
    of the group choices, then the other overrides applied by Hydra's own function), the
    defaults list composed once for all the commands that make the same choices: their
    overrides of values differ (paths, numbers), not the config files they read.
    test_composition_shortcut_is_hydras checks the two agree."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    repository = hydra_loader().repository
    choice = [repository.group_exists(o.key_or_group) for o in parsed]
    cfg = composed_choices(name, tuple(o.input_line for o, c in zip(parsed, choice) if c))
    cfg = copy.deepcopy(cfg)
    ConfigLoaderImpl._apply_overrides_to_config([o for o, c in zip(parsed, choice) if not c], cfg)
    return cfg


def resolve_job(cfg: DictConfig) -> None:
    """What `--cfg job --resolve` prints, resolved: every interpolation outside `hydra`, with
    the run dir Hydra would give the job."""
    from hydra.core.hydra_config import HydraConfig

    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = "/tmp/densex-docs-job"
        cfg.hydra.job.num = 0
    before = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)
    try:
        OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]),
                               resolve=True, throw_on_missing=False)  # fmt: skip
    finally:
        HydraConfig.instance().cfg = before


@functools.cache
def group_options(group: str) -> tuple[str, ...] | None:
    """The options of a config group (None: `group` is a key, not a group)."""
    loader = hydra_loader()
    if not loader.repository.group_exists(group):
        return None
    return tuple(loader.get_group_options(group))


@pytest.mark.parametrize("cmd", ENTRY, ids=ids(ENTRY))
def test_documented_entry_command_composes(cmd: Command) -> None:
    """The command's config composes and resolves as the entry's Hydra would compose it; for a
    multirun its first job, and each further swept value: a group's option must exist (every
    option composes: tests/test_config_schemas.py), any other value is composed in its job."""
    argv = normalized(cmd.argv)
    if "--help" in argv:  # answered without Hydra (tests/test_entry_help.py)
        return
    try:
        name, multirun, overrides = entry_overrides(argv)
        first, further = hydra_jobs(name, multirun, overrides, lambda n, o: composed(n, tuple(o)))
        resolve_job(composed(name, tuple(first)))
        for job in further:
            (changed,) = [o for o in job if o not in first]
            key, _, value = changed.partition("=")
            options = group_options(key)
            if options is None:
                resolve_job(composed(name, tuple(job)))
            else:
                assert value in options, f"{changed}: {key} has no option {value!r} ({options})"
    except Exception as e:  # noqa: BLE001  (the failure names the page, line and command)
        pytest.fail(f"{cmd}\ndoes not compose: {type(e).__name__}: {e}"[:3000], pytrace=False)


def test_composition_shortcut_is_hydras() -> None:
    """`composed` gives what Hydra's compose gives, on commands of each kind the pages show."""
    from hydra import compose

    def job(cfg: DictConfig) -> dict:
        cfg = OmegaConf.to_container(cfg)
        for bookkeeping in ("overrides", "runtime", "job"):  # what the command line was
            cfg["hydra"].pop(bookkeeping)
        return cfg

    for name, *overrides in (
        ("evaluate", "experiment=squad-open", "granularity=sentence", "hydra.sweep.dir=SQ/g"),
        ("evaluate", "task=propositions", "task.subset=all", "propositionizer=model",
         "propositionizer.model=RUN/hf_model", "propositionizer.num_beams=4",
         "granularity.members=[sentence,proposition]", "retriever.late_chunking=true"),
        ("index", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "stage=index",
         "corpus=factoid-wiki", "corpus.sources.sentence=null", "+paths.extra=1"),
        ("train", "experiment=propositionizer-copy-cpu", "hydra.run.dir=RUN", "ckpt_path=last",
         "model.config_overrides.novel_token_weight=4", "~model.warm_start"),
    ):  # fmt: skip
        hydra_loader()
        want = compose(name, overrides, return_hydra_config=True)
        assert job(composed(name, tuple(overrides))) == job(want), (name, overrides)


@pytest.mark.parametrize("cmd", SCRIPTS, ids=ids(SCRIPTS))
def test_documented_script_command_parses(cmd: Command) -> None:
    """A scripts/ or benchmarks/ command: the file exists; a Python script's own argparse
    parser accepts the documented arguments (its main() stopped right after parse_args); a
    shell script run by its path is executable."""
    problem = script_problem(normalized(cmd.argv))
    assert problem is None, f"{cmd}\n{problem}"


def test_documented_make_targets_exist() -> None:
    targets = makefile_targets()
    wrong = [str(c) for c in DOCUMENTED if normalized(c.argv)[0] == "make"
             and not set(normalized(c.argv)[1:]) <= targets]  # fmt: skip
    assert not wrong, f"no such make target: {wrong}"


def test_no_other_python_command() -> None:
    """Every `python X` on the pages is an entry script, a scripts/ or benchmarks/ command or a
    `python -c` snippet (which tests/search/test_docs_snippets.py runs)."""
    other = [str(c) for c in DOCUMENTED if normalized(c.argv)[0] == "python"
             and c not in ENTRY and c not in SCRIPTS and normalized(c.argv)[1] != "-c"]  # fmt: skip
    assert not other, f"commands of nothing the tests know: {other}"


def test_make_bench_runs_every_benchmark_with_arguments_it_parses() -> None:
    """`make bench` runs each Python benchmark, or its comment names why not, with arguments
    the benchmark's parser accepts."""
    recipe = make_recipe("bench")
    runs = [normalized(tuple(shlex.split(line.replace("$(PY)", "python")))) for line in recipe]
    problems = [f"{' '.join(r)}: {p}" for r in runs if (p := script_problem(r))]
    assert not problems, "\n".join(problems)
    named = " ".join([*make_comment("bench"), *recipe])
    missing = [p for p in sorted(rel(f) for f in (REPO / "benchmarks").glob("*.py"))
               if p not in named]  # fmt: skip
    assert not missing, f"`make bench` neither runs nor names (in its comment): {missing}"


def test_every_placeholder_is_used() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in doc_pages())
    unused = [k for k in PLACEHOLDERS if not re.search(rf"(?<!\w){re.escape(k)}\b", text)]
    assert not unused, f"PLACEHOLDERS lists names no page uses: {unused}"


def test_heldout_paths_are_those_heldout_split_writes(shared_data: Path, tmp_path: Path) -> None:
    """Every HELD/... path a command names is one that
    `python scripts/heldout_split.py --out HELD --with-train` writes (run here)."""
    held = {m for c in DOCUMENTED for a in c.argv for m in re.findall(r"\bHELD/[\w./-]+", a)}
    assert held, "no command names HELD/..."
    run_script(
        REPO / "scripts" / "heldout_split.py", ["--out", str(tmp_path / "HELD"), "--with-train"]
    )
    wrong = sorted(p for p in held if not (tmp_path / p).exists())
    assert not wrong, f"scripts/heldout_split.py writes no {wrong}"

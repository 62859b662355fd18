"""`python <entry>.py --help` without Hydra: the entry's help text in well under a second.

Contract: `exit_if_help(entry, conf_dir, argv)` prints `entry_help(entry, conf_dir)` and exits
0 when `argv` asks for help (`--help` / `-h`, not `--hydra-help`, which stays Hydra's);
otherwise it returns and the entry goes on to Hydra. The text is the entry's
`hydra.help.template` (conf/<entry>.yaml: a summary, three examples) with Hydra's
`$APP_CONFIG_GROUPS` replaced by `config_groups(entry, conf_dir)`: only the groups the entry's
defaults list reads (with their subgroups, e.g. `model/optimizer`, and `hydra/launcher`), only
the options a user picks (no internal `schema*` configs), and only the experiments written for
this entry (their usage line runs `python <entry>.py`). Nothing but PyYAML is imported: Hydra's
own help would compose the whole config (seconds) to print the same groups unfiltered.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

GROUPS_PLACEHOLDER = "$APP_CONFIG_GROUPS"  # Hydra's name for the group list in a template
HELP_FLAGS = ("--help", "-h")


def help_requested(argv: Sequence[str]) -> bool:
    """Whether the command line asks for the entry's help (Hydra's `--hydra-help` does not)."""
    return any(a in HELP_FLAGS for a in argv) and "--hydra-help" not in argv


def _options(folder: Path) -> list[str]:
    """The config names of a group folder a user chooses from (no `schema*` configs)."""
    return sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("schema"))


def _default_groups(defaults: Sequence[object]) -> list[str]:
    """The groups of a defaults list (`optional local` -> `local`; `hydra` -> its launcher)."""
    groups = []
    for item in defaults:
        if isinstance(item, dict):
            for key in item:
                name = str(key).split()[-1].lstrip("/")  # "optional local", "override /x"
                groups.append("hydra/launcher" if name == "hydra" else name)
    return groups


def _for_entry(path: Path, entry: str, groups: set[str]) -> bool:
    """Whether an experiment is written for `entry`: its comments run `python <entry>.py`, or
    (no entry named) every group it overrides is one the entry reads."""
    text = path.read_text(encoding="utf-8")
    named = [e for e in ("train", "index", "evaluate", "serve") if f"python {e}.py" in text]
    if named:
        return entry in named
    defaults = (yaml.safe_load(text) or {}).get("defaults") or []
    return all(g.split("@")[0] in groups for g in _default_groups(defaults))


def config_groups(entry: str, conf_dir: str | Path) -> dict[str, list[str]]:
    """`{group: options}` the entry reads, in its defaults list's order (see the module doc)."""
    conf = Path(conf_dir)
    primary = yaml.safe_load((conf / f"{entry}.yaml").read_text(encoding="utf-8")) or {}
    groups = _default_groups(primary.get("defaults") or [])
    out: dict[str, list[str]] = {}
    for group in groups:
        folder = conf / group
        if not folder.is_dir():
            continue
        out[group] = _options(folder)
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and group != "hydra/launcher"):
            out[f"{group}/{sub.name}"] = _options(sub)
    if "experiment" in out:
        names = set(groups)
        out["experiment"] = [
            e
            for e in out["experiment"]
            if _for_entry(conf / "experiment" / f"{e}.yaml", entry, names)
        ]
    return {g: opts for g, opts in out.items() if opts}


def entry_help(entry: str, conf_dir: str | Path) -> str:
    """The entry's help text: its `hydra.help.template` with the groups filled in."""
    conf = Path(conf_dir)
    primary = yaml.safe_load((conf / f"{entry}.yaml").read_text(encoding="utf-8")) or {}
    template = ((primary.get("hydra") or {}).get("help") or {}).get("template")
    if not template:
        raise ValueError(f"{conf / f'{entry}.yaml'}: no hydra.help.template")
    groups = config_groups(entry, conf)
    listing = "\n".join(f"{g}: {', '.join(opts)}" for g, opts in groups.items())
    return str(template).replace(GROUPS_PLACEHOLDER, listing).rstrip("\n") + "\n"


def exit_if_help(entry: str, conf_dir: str | Path, argv: Sequence[str]) -> None:
    """Print the entry's help and exit 0 when `argv` asks for it; return otherwise."""
    if help_requested(argv):
        sys.stdout.write(entry_help(entry, conf_dir))
        sys.stdout.flush()
        raise SystemExit(0)

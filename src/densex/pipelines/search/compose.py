"""The config of an opened index: `conf/serve.yaml` composed with the entries' overrides.

Contract: `split_granularities(overrides)` takes the one `granularity=a,b,c` override out of a
list (a comma list opens several granularities side by side) and returns `(granularities or
None, the other overrides)`; `compose_configs(overrides)` gives one composed `DictConfig` per
granularity, through the Hydra app that is running (inside `serve.py`) or, outside Hydra, the
repository's `conf/` (`DENSEX_CONF_DIR` overrides where it is). `granularity_argv(argv)` is
`serve.py`'s rewrite of such a list into `granularity=a serve.granularities=[a,b,c]`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from densex.pipelines.schemas import register_configs

CONFIG_NAME = "serve"
# src/densex/pipelines/search/compose.py -> the repository root, where conf/ and the entries are
REPO_ROOT = Path(__file__).resolve().parents[4]


def conf_dir() -> Path:
    """The `conf/` directory the entries compose from (`DENSEX_CONF_DIR` overrides it)."""
    path = Path(os.environ.get("DENSEX_CONF_DIR") or REPO_ROOT / "conf")
    if not (path / f"{CONFIG_NAME}.yaml").exists():
        raise FileNotFoundError(
            f"{path}: no {CONFIG_NAME}.yaml here; set DENSEX_CONF_DIR to densex's conf/ directory"
        )
    return path


def split_granularities(overrides: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """`(["passage", "sentence"], rest)` for `granularity=passage,sentence` among `overrides`
    (a single value gives a one-item list; no such override gives None)."""
    grans: list[str] | None = None
    rest: list[str] = []
    for o in overrides:
        key, sep, value = str(o).partition("=")
        if sep and key.lstrip("+~") == "granularity":
            names = [v.strip() for v in value.strip("[]").split(",") if v.strip()]
            if not names:
                raise ValueError(f"{o!r}: name at least one granularity")
            if grans is not None:
                raise ValueError(f"{o!r}: granularity is given twice")
            grans = list(dict.fromkeys(names))
        else:
            rest.append(str(o))
    return grans, rest


def sweep_granularities(hydra_cfg: DictConfig | None) -> list[str] | None:
    """The granularities a config's sweep lists (`hydra.sweeper.params.granularity`, e.g.
    `experiment=demo`'s), given the `hydra` node; None when it lists none."""
    params = OmegaConf.select(hydra_cfg, "sweeper.params") if hydra_cfg is not None else None
    value = params.get("granularity") if params else None
    return split_granularities([f"granularity={value}"])[0] if value else None


def compose_configs(overrides: Sequence[str], config_name: str = CONFIG_NAME) -> list[DictConfig]:
    """One composed config per requested granularity (without a `granularity=` override: those
    of the experiment's sweep, else the config's default), in the order given."""
    grans, rest = split_granularities(overrides)
    os.environ.setdefault("PROJECT_ROOT", str(REPO_ROOT))
    register_configs()
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app (serve.py)
        return _compose_all(config_name, grans, rest)
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        return _compose_all(config_name, grans, rest)


def _compose_all(name: str, grans: list[str] | None, rest: list[str]) -> list[DictConfig]:
    if grans is None:
        grans = sweep_granularities(compose(name, overrides=rest, return_hydra_config=True).hydra)
    sets = [[*rest, f"granularity={g}"] for g in grans] if grans else [rest]
    return [compose(name, overrides=o) for o in sets]


def granularity_argv(argv: list[str]) -> list[str]:
    """`granularity=a,b,c` (a Hydra sweep outside `-m`) -> `granularity=a` plus
    `serve.granularities=[a,b,c]`, so one server holds all three; other arguments unchanged."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key == "granularity" and "," in value:
            names = [v.strip() for v in value.strip("[]").split(",") if v.strip()]
            out += [f"granularity={names[0]}", f"serve.granularities=[{','.join(names)}]"]
        else:
            out.append(arg)
    return out

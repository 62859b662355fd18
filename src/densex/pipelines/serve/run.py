"""`serve.py`: open the configured indexes and serve them (`app.create_app`) with uvicorn.

Contract: `run(cfg)` composes one config per granularity of `serve.granularities` (set by
`serve.py` from `granularity=a,b,c`; without a `granularity=` override, those the
experiment's sweep lists, so `experiment=demo` serves all three; else the one granularity)
with the job's own overrides, preflights each (`preflight_all`: before torch and the index
modules are imported; one `preflight ok` line for all of them), opens
them through `pipelines.search.index.open_configs` (units, embeddings and index built when
missing, as `evaluate.py` builds them; a cache that `evaluate.py` filled is reused as it is),
reads `serve.sweep_dir` when set (`latest`: `resolve_sweep_dir`), logs a warning when no
benchmark question can get its answers highlighted (`IndexSet.question_problem`), and blocks
serving `http://{serve.host}:{serve.port}` until interrupted. `main(cfg)` is the
entry's wrapper: logging, and bad configuration or input ends the process with one line and
status 2 (the other entries' `preflight.run.fail`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from densex.pipelines.preflight.hub import PreflightError
from densex.pipelines.preflight.run import fail, preflight
from densex.pipelines.search.compose import compose_configs, sweep_granularities
from densex.pipelines.serve.sweep_data import SweepData
from densex.pipelines.specs import ServeSpec
from densex.utils.io import DataError
from densex.utils.logging import get_logger, setup_logging

log = get_logger(__name__)


def job_configs(cfg: DictConfig) -> list[DictConfig]:
    """The job's config, or one per `serve.granularities` (else, without a `granularity=`
    override, per granularity of the experiment's sweep: `experiment=demo` serves its three),
    composed with the job's overrides."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():  # called outside serve.py: the config as given
        return [cfg]
    hydra_cfg = HydraConfig.get()
    keys = [o.partition("=")[0].lstrip("+~") for o in hydra_cfg.overrides.task]
    grans = cfg.serve.get("granularities")
    if not grans and "granularity" not in keys:
        grans = sweep_granularities(hydra_cfg)
    if not grans:
        return [cfg]
    overrides = [o for o, key in zip(hydra_cfg.overrides.task, keys)
                 if key not in ("granularity", "serve.granularities")]  # fmt: skip
    return compose_configs([*overrides, f"granularity={','.join(map(str, grans))}"])


def resolve_sweep_dir(value: str | None, cfg: DictConfig) -> str | None:
    """`serve.sweep_dir`: a directory as given, or `latest`: the newest finished multirun
    (one with `multirun.yaml` and `table2.md`) of this task, `{paths.log_dir}/{task_name}/
    multiruns/*` (`experiment=demo`: the last `make demo`); none there is a PreflightError."""
    if value != "latest":
        return value
    root = Path(str(cfg.paths.log_dir)) / str(cfg.task_name) / "multiruns"
    done = sorted(p for p in root.glob("*") if (p / "multirun.yaml").exists() and (p / "table2.md").exists())  # fmt: skip
    if not done:
        raise PreflightError(f"serve.sweep_dir=latest: no finished multirun in {root}; run the "
                             f"sweep first (make demo) or name a directory")  # fmt: skip
    return str(done[-1])


def preflight_all(cfgs: Sequence[DictConfig]) -> list[dict[str, Any]]:
    """`preflight(c, "index")` of each served config (each granularity is checked: a
    proposition index needs propositions) with one `preflight ok` line, the first's: the
    line names the models and the cache, the same for every granularity. Raises
    `PreflightError`."""
    return [preflight(c, "index", announce=i == 0) for i, c in enumerate(cfgs)]


def run(cfg: DictConfig) -> None:
    """Open the indexes and serve them until interrupted (see the module doc)."""
    spec: ServeSpec = OmegaConf.to_object(cfg.serve)
    cfgs = job_configs(cfg)
    preflight_all(cfgs)  # bad input fails in seconds, before torch and the index modules load
    sweep_dir = resolve_sweep_dir(spec.sweep_dir, cfg)
    import uvicorn  # the serve extra; only this entry needs it

    from densex.pipelines.search.index import open_configs
    from densex.pipelines.serve.app import create_app

    indexes = open_configs(cfgs, checked=True)
    indexes.compare(["warm-up"], 1)  # load each query encoder before the first request
    sweep = SweepData.load(sweep_dir) if sweep_dir else None
    app = create_app(indexes, spec, sweep)
    if app.state.question_problem:
        log.warning("%s", app.state.question_problem)
    log.info("serving %s on http://%s:%d%s", ", ".join(indexes), spec.host, spec.port,
             f" (sweep {sweep_dir})" if sweep else "")  # fmt: skip
    print(f"densex: serving {', '.join(indexes)} on http://{spec.host}:{spec.port}", flush=True)
    uvicorn.run(app, host=spec.host, port=spec.port, log_level=spec.log_level)


def main(cfg: DictConfig) -> None:
    """The entry's body: logging, then `run`; bad input exits 2 with one line."""
    setup_logging(bool(cfg.get("verbose", False)))
    try:
        run(cfg)
    except (PreflightError, DataError) as e:
        fail(e)

"""`serve.py`: open the configured indexes and serve them (`app.create_app`) with uvicorn.

Contract: `run(cfg)` composes one config per granularity of `serve.granularities` (set by
`serve.py` from `granularity=a,b,c`; else the one granularity) with the job's own overrides,
preflights each (before torch and the index modules are imported), opens them through
`pipelines.search.index.open_configs` (units, embeddings and index built when missing, as
`evaluate.py` builds them), reads `serve.sweep_dir` when set,
and blocks serving `http://{serve.host}:{serve.port}` until interrupted. `main(cfg)` is the
entry's wrapper: logging, and bad configuration or input ends the process with one line and
status 2 (the other entries' `preflight.run.fail`).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from densex.pipelines.preflight.hub import PreflightError
from densex.pipelines.preflight.run import fail, preflight
from densex.pipelines.search.compose import compose_configs
from densex.pipelines.serve.sweep_data import SweepData
from densex.pipelines.specs import ServeSpec
from densex.utils.io import DataError
from densex.utils.logging import get_logger, setup_logging

log = get_logger(__name__)


def job_configs(cfg: DictConfig) -> list[DictConfig]:
    """The job's config, or one per `serve.granularities`, composed with the job's overrides."""
    grans = cfg.serve.get("granularities")
    if not grans:
        return [cfg]
    from hydra.core.hydra_config import HydraConfig  # only inside a Hydra job

    overrides = [o for o in HydraConfig.get().overrides.task
                 if o.partition("=")[0].lstrip("+~") not in ("granularity", "serve.granularities")]  # fmt: skip
    return compose_configs([*overrides, f"granularity={','.join(map(str, grans))}"])


def run(cfg: DictConfig) -> None:
    """Open the indexes and serve them until interrupted (see the module doc)."""
    spec: ServeSpec = OmegaConf.to_object(cfg.serve)
    cfgs = job_configs(cfg)
    for c in cfgs:  # bad input fails in seconds, before torch and the index modules load
        preflight(c, "index")
    import uvicorn  # the serve extra; only this entry needs it

    from densex.pipelines.search.index import open_configs
    from densex.pipelines.serve.app import create_app

    indexes = open_configs(cfgs, checked=True)
    indexes.compare(["warm-up"], 1)  # load each query encoder before the first request
    sweep = SweepData.load(spec.sweep_dir) if spec.sweep_dir else None
    app = create_app(indexes, spec, sweep)
    log.info("serving %s on http://%s:%d%s", ", ".join(indexes), spec.host, spec.port,
             f" (sweep {spec.sweep_dir})" if sweep else "")  # fmt: skip
    print(f"densex: serving {', '.join(indexes)} on http://{spec.host}:{spec.port}", flush=True)
    uvicorn.run(app, host=spec.host, port=spec.port, log_level=spec.log_level)


def main(cfg: DictConfig) -> None:
    """The entry's body: logging, then `run`; bad input exits 2 with one line."""
    setup_logging(bool(cfg.get("verbose", False)))
    try:
        run(cfg)
    except (PreflightError, DataError) as e:
        fail(e)

"""Hydra entry: search + metrics for one benchmark cell. Preflight, then the logic in `densex.pipelines.evaluate.run`."""

import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

from densex.pipelines.schemas import register_configs

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))
register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> float | None:
    from densex.pipelines.preflight.run import main as run_entry

    return run_entry(cfg, "evaluate")


if __name__ == "__main__":
    main()

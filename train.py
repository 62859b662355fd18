"""Hydra entry: fine-tune a propositionizer. Logic lives in `densex.pipelines.train`."""

import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from densex.pipelines.train import run

    return run(cfg)


if __name__ == "__main__":
    main()

"""Hydra entry: search + metrics for one benchmark cell. Preflight, then the logic in `densex.pipelines.evaluate.run`.

`python evaluate.py --help` is answered without Hydra (`densex.pipelines.entry_help`: under a second)."""

import os
import sys
from pathlib import Path

from densex.pipelines.entry_help import exit_if_help

ROOT = Path(__file__).resolve().parent
os.environ.setdefault("PROJECT_ROOT", str(ROOT))


def main() -> float | None:
    """Compose conf/evaluate.yaml with the command line (Hydra), then preflight and run."""
    import hydra
    from omegaconf import DictConfig

    from densex.pipelines.schemas import register_configs

    register_configs()

    @hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
    def evaluate(cfg: DictConfig) -> float | None:
        from densex.pipelines.preflight.run import main as run_entry

        return run_entry(cfg, "evaluate")

    return evaluate()


if __name__ == "__main__":
    exit_if_help("evaluate", ROOT / "conf", sys.argv[1:])
    main()

"""Hydra entry: the search service and explorer page over cached indexes. Logic in `densex.pipelines.serve.run`.

`granularity=passage,sentence,proposition` serves all three from one process (rewritten to
`serve.granularities` before Hydra parses it; without `-m` Hydra would refuse the list).
"""

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from densex.pipelines.schemas import register_configs
from densex.pipelines.search.compose import granularity_argv

os.environ.setdefault("PROJECT_ROOT", str(Path(__file__).resolve().parent))
register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="serve")
def main(cfg: DictConfig) -> None:
    from densex.pipelines.serve.run import main as run_entry

    run_entry(cfg)


if __name__ == "__main__":
    sys.argv = granularity_argv(sys.argv)
    main()

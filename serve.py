"""Hydra entry: the search service and explorer page over cached indexes. Logic in `densex.pipelines.serve.run`.

`granularity=passage,sentence,proposition` serves all three from one process (rewritten to
`serve.granularities` before Hydra parses it; without `-m` Hydra would refuse the list).
"""

import os
import sys
from pathlib import Path

from densex.pipelines.entry_help import exit_if_help

ROOT = Path(__file__).resolve().parent
os.environ.setdefault("PROJECT_ROOT", str(ROOT))
if __name__ == "__main__":  # `--help` answered without Hydra (entry_help: under a second)
    exit_if_help("serve", ROOT / "conf", sys.argv[1:])

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from densex.pipelines.schemas import register_configs  # noqa: E402
from densex.pipelines.search.compose import granularity_argv  # noqa: E402

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="serve")
def main(cfg: DictConfig) -> None:
    from densex.pipelines.serve.run import main as run_entry

    run_entry(cfg)


if __name__ == "__main__":
    sys.argv = granularity_argv(sys.argv)
    main()

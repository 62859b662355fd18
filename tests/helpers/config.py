"""Compose the project's Hydra configs in tests (the `cfg_train` / `cfg_eval` fixtures): the
package's one composition (`densex.pipelines.compose`), which benchmarks use too."""

from __future__ import annotations

from densex.pipelines.compose import CONF_DIR, compose_config, group_config
from densex.pipelines.schemas import register_configs
from helpers import compose_memo

# the group schemas, as the entry scripts register them; conftest imports this module, so
# every test that composes a config (through here or not) finds them
register_configs()
# and every composition of the test process is memoised (the same config again: a copy)
compose_memo.install()

__all__ = ["CONF_DIR", "compose_config", "group_config"]

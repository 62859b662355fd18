"""The type of a data record: one row of a JSONL/CSV file or of a results table.

`Record` is a data row, not configuration: a passage `{"id", "title", "text"}`, a question,
a `results.jsonl` row, a per-question row, a shard's plan. Configuration reaches the layers
below `pipelines/` as typed specs or plain values, never as a mapping (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# config-types: the one alias of a data row (JSON object, CSV row, results row), not config
Record = Mapping[str, Any]

__all__ = ["Record"]

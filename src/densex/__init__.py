"""densex: retrieval granularity research (passages, sentences, propositions).

`densex.open_index(*overrides)` opens cached indexes for search (`densex.pipelines.search`);
it is imported on first use, so `import densex` stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["open_index"]


def __getattr__(name: str) -> Any:
    if name == "open_index":  # lazy: the search API loads torch, faiss and Hydra
        from densex.pipelines.search.index import open_index

        return open_index
    raise AttributeError(f"module 'densex' has no attribute {name!r}")

"""densex: retrieval granularity research (passages, sentences, propositions).

`densex.open_index(*overrides, verbose=False)` opens cached indexes for search
(`densex.pipelines.search`); the search API is imported on first use, so `import densex`
stays cheap and configures nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from densex.pipelines.search.index import IndexSet

__version__ = "0.1.0"
__all__ = ["open_index"]


def open_index(*overrides: str, verbose: bool = False) -> IndexSet:
    """Open (building what is missing) the indexes named by Hydra overrides of the entries,
    e.g. `open_index("experiment=demo")` (the indexes `make demo` built) or
    `open_index("corpus=squad-open", "granularity=passage,proposition")`; see
    `densex.pipelines.search.index.open_index`.

    Quiet unless asked (`densex.utils.logging.library_logging`): densex logs WARNING and above
    and third-party loading noise (faiss's loader, transformers' weight-loading report,
    progress bars) is silenced; `verbose=True`, or a level the application set on the
    `densex` logger (`logging.getLogger("densex").setLevel(logging.INFO)`), shows more.
    """
    from densex.utils.logging import library_logging

    library_logging(verbose)
    from densex.pipelines.search.index import open_index as _open  # torch, faiss, Hydra

    return _open(*overrides)

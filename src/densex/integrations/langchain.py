"""A LangChain retriever over a densex index (extra `langchain`: `langchain-core` only).

Contract: `DensexRetriever(index=densex.open_index(...), k=5, granularity=None)` is a
`langchain_core.retrievers.BaseRetriever`; `retriever.invoke(query)` returns the top-k passages
as `Document`s (`page_content` = passage text; metadata `id`, `title`, `score`, `rank`,
`granularity` and `units`: the matched units' id, text, score and `[start, end]` span in the
passage), the ranking `IndexSet.search` gives. `granularity` may be left out only when the
index holds one granularity (it is then filled in); on an index of several, leaving it out is
a ValueError naming them, as is an unknown one. `k` must be in 1..the corpus's passages (a
search returns unique passages): a larger `k` is a ValueError at construction, not a
silently shorter list. `DensexRetriever.from_overrides(*overrides, k=...)` opens the index too.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, model_validator

from densex.pipelines.search.index import Hit, IndexSet, open_index


def hit_document(hit: Hit, rank: int, granularity: str) -> Document:
    """One ranked passage as a LangChain `Document`."""
    d = hit.to_dict()
    meta = {"id": d["id"], "title": d["title"], "score": d["score"], "rank": rank,
            "granularity": granularity, "units": d["units"]}  # fmt: skip
    return Document(page_content=d["text"], metadata=meta, id=d["id"])


class DensexRetriever(BaseRetriever):
    """Passages scored by their best unit (proposition, sentence or passage) of a densex index."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any  # an IndexSet (typed Any: pydantic needs no schema for it)
    k: int = 5
    granularity: str | None = None
    units_per_passage: int = 3

    @model_validator(mode="after")
    def _checked(self) -> DensexRetriever:
        """The granularity stated (or the only one), `k` within the corpus."""
        index: IndexSet = self.index
        try:
            self.granularity = index.granularity(self.granularity)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        index[self.granularity].check_k(self.k)
        return self

    @classmethod
    def from_overrides(cls, *overrides: str, **kwargs: Any) -> DensexRetriever:
        """`densex.open_index(*overrides)` wrapped as a retriever (`k`, `granularity`, ...)."""
        return cls(index=open_index(*overrides), **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        index: IndexSet = self.index
        (hits,) = index.search([query], self.k, self.granularity, self.units_per_passage)
        return [hit_document(h, rank, self.granularity) for rank, h in enumerate(hits, start=1)]

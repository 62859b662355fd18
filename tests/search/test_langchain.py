"""`densex.integrations.langchain.DensexRetriever` (extra `langchain`), on the demo index."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from densex.integrations.langchain import DensexRetriever  # noqa: E402

QUESTION = "In what year did Kessingbury receive its royal charter?"


def test_invoke_returns_passages_with_their_units(demo_index):
    retriever = DensexRetriever(index=demo_index, k=3, granularity="proposition")
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke(QUESTION)
    (hits,) = demo_index.search([QUESTION], 3, "proposition")
    assert all(isinstance(d, Document) for d in docs) and len(docs) == 3
    assert [d.metadata["id"] for d in docs] == [h.id for h in hits]
    assert [d.page_content for d in docs] == [h.text for h in hits]
    top = docs[0].metadata
    assert top["rank"] == 1 and top["granularity"] == "proposition"
    assert top["score"] == pytest.approx(hits[0].score)
    unit = top["units"][0]
    assert "1312" in unit["text"] and unit["score"] == pytest.approx(hits[0].score)
    start, end = unit["span"]
    assert "1312" in docs[0].page_content[start:end]


def test_granularity_is_required_on_several_and_stated_on_one(demo_index, demo_sweep):
    with pytest.raises(ValueError, match=r"3 granularities are open \(passage, sentence, "
                                         r"proposition\): name one"):  # fmt: skip
        DensexRetriever(index=demo_index, k=5)
    with pytest.raises(ValueError, match="unknown granularity 'word'"):
        DensexRetriever(index=demo_index, granularity="word")
    import densex

    _, cache = demo_sweep
    one = densex.open_index("corpus=demo", "dataset=demo", "retriever=minilm", "trainer=cpu",
                            f"paths.cache_dir={cache}", "granularity=sentence")  # fmt: skip
    retriever = DensexRetriever(index=one, k=2)
    assert retriever.granularity == "sentence"  # the only one, stated
    out = retriever.batch([QUESTION, "Who owned the last ropewalk?"])
    assert [len(d) for d in out] == [2, 2]
    assert {d.metadata["granularity"] for docs in out for d in docs} == {"sentence"}


def test_k_above_the_corpus_is_an_error(demo_index):
    with pytest.raises(ValueError, match="k=100 is more than the 51 passages of corpus=demo"):
        DensexRetriever(index=demo_index, k=100, granularity="proposition")
    docs = DensexRetriever(index=demo_index, k=51, granularity="proposition").invoke(QUESTION)
    assert len(docs) == 51 and len({d.metadata["id"] for d in docs}) == 51

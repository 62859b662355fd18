"""The paper's passage rule (Appendix A): invariants on real SQuAD paragraphs and random input,
and an exact reproduction of the shared squad-open passages."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from densex.corpus.readers import read_squad_documents
from densex.corpus.segment import (
    chunk_sentences,
    count_words,
    load_sentencizer,
    segment_paragraphs,
    split_sentences,
    split_sentences_many,
)


def _words(chunk: list[str]) -> int:
    return sum(count_words(s) for s in chunk)


def assert_greedy_chunking(
    sentences: list[str], chunks: list[list[str]], max_words: int = 100, min_tail: int = 50
) -> None:
    """Everything the rule promises, stated without re-running it."""
    assert [s for c in chunks for s in c] == list(sentences)  # nothing lost or duplicated
    assert all(chunks)
    if not sentences:
        assert chunks == []
        return
    for i, chunk in enumerate(chunks[:-1]):
        # a chunk ends only where the next sentence would overflow it ...
        assert _words(chunk) + count_words(chunks[i + 1][0]) > max_words
        # ... so it exceeds the limit only when it is one long sentence
        assert _words(chunk) <= max_words or len(chunk) == 1
    last = chunks[-1]
    if len(chunks) > 1:
        # a short tail was merged back: either the last chunk stands on its own (>= min_tail
        # words) or it is the previous chunk plus the tail, which overflowed max_words
        assert _words(last) >= min(min_tail, max_words + 1)
    # the last chunk is a greedy chunk, plus possibly a merged tail of < min_tail words
    k = 1
    while k < len(last) and _words(last[: k + 1]) <= max_words:
        k += 1
    assert not last[k:] or _words(last[k:]) < min_tail


@pytest.fixture(scope="module")
def nlp():
    return load_sentencizer("")  # the rule-based sentencizer the shared passages were made with


@pytest.fixture(scope="module")
def squad_paragraphs(squad_open, nlp):
    docs = list(read_squad_documents(squad_open / "squad-dev-v1.1.json"))
    return docs, list(split_sentences_many((d["text"] for d in docs), nlp))


def test_invariants_hold_on_every_squad_paragraph(squad_paragraphs) -> None:
    docs, sentences = squad_paragraphs
    assert len(docs) == 1529
    n_chunks = n_long_single = 0
    for doc, sents in zip(docs, sentences):
        chunks = chunk_sentences(sents)
        assert_greedy_chunking(sents, chunks)
        n_chunks += len(chunks)
        n_long_single += sum(len(c) == 1 and _words(c) > 100 for c in chunks)
        # same characters as the paragraph; only whitespace between sentences may change
        # (the sentencizer can split at '("', and passages join sentences with one space)
        squash = lambda t: "".join(t.split())  # noqa: E731
        assert squash(" ".join(" ".join(c) for c in chunks)) == squash(doc["text"])
    assert n_chunks == 2203
    assert n_long_single > 0  # the data exercises the "one sentence over 100 words" case


def test_reproduces_the_shared_squad_open_passages(squad_open, squad_paragraphs, nlp) -> None:
    docs, _ = squad_paragraphs
    ours = [
        {"id": f"{d['id']}-{c}", "title": d["title"], "section": "", "text": text}
        for d, texts in zip(docs, segment_paragraphs((d["text"] for d in docs), nlp))
        for c, text in enumerate(texts)
    ]
    with (squad_open / "passages.jsonl").open(encoding="utf-8") as f:
        shared = [json.loads(line) for line in f]
    assert len(ours) == len(shared) == 2203
    mismatched = [a["id"] for a, b in zip(ours, shared) if a != b]
    assert mismatched == []  # 2203/2203 identical: ids, titles (underscores -> spaces), text


sentence = st.integers(min_value=1, max_value=140).map(
    lambda n: " ".join(["w"] * (n - 1) + ["end."])
)


@given(
    sentences=st.lists(sentence, max_size=30),
    max_words=st.integers(min_value=5, max_value=120),
    min_tail=st.integers(min_value=0, max_value=60),
)
def test_chunk_sentences_properties(sentences: list[str], max_words: int, min_tail: int) -> None:
    assert_greedy_chunking(
        sentences, chunk_sentences(sentences, max_words, min_tail), max_words, min_tail
    )


def test_chunk_sentences_examples() -> None:
    s = lambda n: " ".join(["w"] * n)  # noqa: E731
    # 60+30 fit; 20 more would make 110 > 100 -> a new chunk of 20 < 50 words -> merged back
    assert chunk_sentences([s(60), s(30), s(20)]) == [[s(60), s(30), s(20)]]
    assert chunk_sentences([s(60), s(30), s(60)]) == [[s(60), s(30)], [s(60)]]
    assert chunk_sentences([s(150), s(60)]) == [[s(150)], [s(60)]]  # long sentence alone
    assert chunk_sentences([s(10)]) == [[s(10)]]  # a sole short chunk stays
    assert chunk_sentences([]) == []
    with pytest.raises(ValueError):
        chunk_sentences([s(3)], max_words=0)


def test_split_sentences_and_fallback_warning(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="densex.corpus.segment"):
        nlp = load_sentencizer("no_such_spacy_model_xyz")
    assert "not installed" in caplog.text and "sentencizer" in caplog.text
    assert nlp.pipe_names == ["sentencizer"]
    text = "The embargo began in 1973.  Prices rose! Did they fall?\n"
    assert split_sentences(text, nlp) == [
        "The embargo began in 1973.",
        "Prices rose!",
        "Did they fall?",
    ]
    assert split_sentences("   ", nlp) == []

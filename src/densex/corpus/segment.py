"""Sentence splitting and the paper's 100-word passage rule (Dense X Retrieval, Appendix A).

Passages are greedy chunks of whole sentences: a chunk ends only at a sentence end, a sentence
that would take it past `max_words` starts the next chunk, and a final chunk shorter than
`min_tail_words` is merged into the previous one. Words are whitespace tokens. Sentences come
from spaCy: `en_core_web_lg` when installed, else spaCy's rule-based `sentencizer`, which is
what the shared squad-open passages were made with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from densex.utils.logging import get_logger

if TYPE_CHECKING:  # spaCy is imported when a pipeline is loaded, not with this module
    from spacy.language import Language

log = get_logger(__name__)

__all__ = [
    "chunk_sentences",
    "count_words",
    "load_sentencizer",
    "segment_paragraphs",
    "sentencizer_id",
    "split_sentences",
    "split_sentences_many",
]

# Components the sentence boundaries never depend on; skipping them makes `lg` ~3x faster.
_UNUSED = ("ner", "lemmatizer", "attribute_ruler", "textcat", "entity_ruler")


def count_words(text: str) -> int:
    """Words as the paper counts them: whitespace-separated tokens."""
    return len(text.split())


def sentencizer_id(spacy_model: str | None = "en_core_web_lg") -> str:
    """Which splitter `load_sentencizer(spacy_model)` will give, with its version (a cache key:
    installing the model later must not reuse sentences made by the fallback)."""
    import spacy
    from spacy.util import get_package_version, is_package

    if spacy_model and is_package(spacy_model):
        return f"{spacy_model}=={get_package_version(spacy_model)}"
    return f"spacy=={spacy.__version__}:blank-en+sentencizer"


@lru_cache(maxsize=4)
def load_sentencizer(spacy_model: str | None = "en_core_web_lg") -> Language:
    """A spaCy pipeline that sets sentence boundaries.

    Falls back (with a warning) to a blank English pipeline with the rule-based `sentencizer`
    when `spacy_model` is not installed, so tests and the demo run without a 600 MB download;
    an empty name (or None) asks for the rule-based sentencizer directly, without a warning.
    """
    import spacy

    if spacy_model:
        try:
            return spacy.load(spacy_model, exclude=list(_UNUSED))
        except OSError:
            log.warning(
                "spaCy model %r is not installed; using the rule-based 'sentencizer' "
                "(python -m spacy download %s for the paper's setting)",
                spacy_model,
                spacy_model,
            )
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def _sentences(doc) -> list[str]:
    return [s.text.strip() for s in doc.sents if s.text.strip()]


def split_sentences(text: str, nlp: Language) -> list[str]:
    """The non-empty sentences of `text`, stripped of surrounding whitespace."""
    return _sentences(nlp(text))


def split_sentences_many(
    texts: Iterable[str], nlp: Language, batch_size: int = 256, n_process: int = 1
) -> Iterator[list[str]]:
    """`split_sentences` over many texts with `nlp.pipe` (batched, one pass; `n_process` > 1
    splits in that many worker processes, in input order)."""
    for doc in nlp.pipe(texts, batch_size=batch_size, n_process=n_process):
        yield _sentences(doc)


def chunk_sentences(
    sentences: Sequence[str], max_words: int = 100, min_tail_words: int = 50
) -> list[list[str]]:
    """Group sentences into passages by the paper's greedy rule.

    Concatenating the chunks gives back `sentences` exactly. A chunk exceeds `max_words` only
    if it is one sentence longer than that, or it is the last chunk with a short tail merged in.
    """
    if max_words < 1 or min_tail_words < 0:
        raise ValueError(
            f"need max_words >= 1 and min_tail_words >= 0, got {max_words}, {min_tail_words}"
        )
    chunks: list[list[str]] = []
    current: list[str] = []
    n_words = 0
    for sentence in sentences:
        w = count_words(sentence)
        if current and n_words + w > max_words:
            chunks.append(current)
            current, n_words = [], 0
        current.append(sentence)
        n_words += w
    if current:
        if chunks and n_words < min_tail_words:
            chunks[-1].extend(current)
        else:
            chunks.append(current)
    return chunks


def segment_paragraphs(
    texts: Iterable[str],
    nlp: Language,
    max_words: int = 100,
    min_tail_words: int = 50,
    n_process: int = 1,
) -> Iterator[list[str]]:
    """For each paragraph, its passage texts (sentences of a chunk joined by one space)."""
    for sentences in split_sentences_many(texts, nlp, n_process=n_process):
        yield [" ".join(c) for c in chunk_sentences(sentences, max_words, min_tail_words)]

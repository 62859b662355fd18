"""The tests' edge: settings written as plain dicts (what a YAML file of the group would say)
turned into the typed specs the layers below `pipelines/` take, by the entry pipelines' own
conversion (`densex.pipelines.edge`), then handed to the real function. Same names and
argument order as the functions they call, so a test reads as the call it makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from densex.pipelines.edge import (
    corpus_spec,
    dataset_spec,
    index_spec,
    propositionizer_settings,
    retriever_spec,
)

__all__ = [
    "build_index",
    "build_index_to_dir",
    "build_units",
    "load_dataset_questions",
    "read_documents",
    "source_rows",
    "units_dir_for",
    "units_key",
    "build_retriever",
    "encode_units_to_dir",
    "generate_propositions",
    "load_or_build_searcher",
    "teacher_from_config",
]


def load_or_build_searcher(
    units_path: Any, retriever: Any, index: Any, cache_dir: Any,
    trainer_args: dict[str, Any] | None = None, shard_size: int | None = None,
) -> Any:  # fmt: skip
    """`retrieval.build.load_or_build_searcher` with a retriever / index dict."""
    from densex.retrieval.build import load_or_build_searcher as build

    return build(units_path, retriever_spec(retriever), index_spec(index), cache_dir,
                 trainer_args, shard_size)  # fmt: skip


def encode_units_to_dir(
    units_path: Any, retriever: Any, out_dir: Any, trainer_args: Any = None, **kwargs: Any
) -> Any:
    """`retrieval.encode.encode_units_to_dir` with a retriever dict."""
    from densex.retrieval.encode import encode_units_to_dir as encode

    return encode(units_path, retriever_spec(retriever), out_dir, trainer_args, **kwargs)


def build_retriever(retriever: Any) -> Any:
    """`retrieval.encoders.build_retriever` with a retriever dict."""
    from densex.retrieval.encoders import build_retriever as build

    return build(retriever_spec(retriever))


def generate_propositions(
    passages_path: Any, propositionizer: Any, out_path: Any, trainer_args: Any = None
) -> Path:
    """`propositionizer.generate.generate_propositions` with a propositionizer dict."""
    from densex.propositionizer.generate import generate_propositions as generate

    return generate(passages_path, propositionizer_settings(propositionizer), out_path,
                    trainer_args)  # fmt: skip


def teacher_from_config(propositionizer: Any, default_cache_dir: Any) -> Any:
    """`propositionizer.teacher_backend.teacher_from_settings` with a propositionizer dict."""
    from densex.propositionizer.teacher_backend import teacher_from_settings

    return teacher_from_settings(propositionizer_settings(propositionizer), default_cache_dir)


def build_index(vectors: Any, index: Any = None) -> Any:
    """`retrieval.faiss_index.build_index` with an index dict."""
    from densex.retrieval.faiss_index import build_index as build

    return build(vectors, index_spec(index))


def build_index_to_dir(vectors: Any, index: Any, out_dir: Any, **manifest: Any) -> Any:
    """`retrieval.faiss_index.build_index_to_dir` with an index dict."""
    from densex.retrieval.faiss_index import build_index_to_dir as build

    return build(vectors, index_spec(index), out_dir, **manifest)


def build_units(corpus: Any, out_dir: Any, propositions_path: Any = None, **kwargs: Any) -> Any:
    """`corpus.units.build_units` with a corpus dict or node."""
    from densex.corpus.units import build_units as build

    return build(corpus_spec(corpus), out_dir, propositions_path, **kwargs)


def units_dir_for(corpus: Any, cache_dir: Any, propositions_path: Any = None) -> Path:
    """`corpus.units_key.units_dir_for` with a corpus dict or node."""
    from densex.corpus.units_key import units_dir_for as units_dir

    return units_dir(corpus_spec(corpus), cache_dir, propositions_path)


def units_key(corpus: Any, propositions_path: Any = None) -> str:
    """`corpus.units_key.units_key` with a corpus dict or node."""
    from densex.corpus.units_key import units_key as key

    return key(corpus_spec(corpus), propositions_path)


def read_documents(corpus: Any, skips: Any = None) -> Any:
    """`corpus.documents.read_documents` with a corpus dict or node."""
    from densex.corpus.documents import read_documents as read

    return read(corpus_spec(corpus), skips)


def source_rows(corpus: Any, skips: Any) -> Any:
    """`corpus.sources.source_rows` with a corpus dict or node."""
    from densex.corpus.sources import source_rows as rows

    return rows(corpus_spec(corpus), skips)


def load_dataset_questions(dataset: Any, limit: Any = None, **kwargs: Any) -> list[dict]:
    """`data.questions.load_dataset_questions` with a dataset dict or node."""
    from densex.data.questions import load_dataset_questions as load

    return load(dataset_spec(dataset), limit, **kwargs)

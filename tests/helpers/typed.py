"""The tests' edge: settings written as plain dicts (what a YAML file of the group would say)
turned into the typed specs the layers below `pipelines/` take, by the entry pipelines' own
conversion (`densex.pipelines.edge`), then handed to the real function. Same names and
argument order as the functions they call, so a test reads as the call it makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from densex.pipelines.edge import index_spec, propositionizer_settings, retriever_spec

__all__ = [
    "build_retriever",
    "encode_units_to_dir",
    "generate_propositions",
    "load_or_build_searcher",
    "teacher_from_config",
]


def load_or_build_searcher(
    units_path: Any, retriever: Any, index: Any, cache_dir: Any,
    trainer_args: dict[str, Any] | None = None, **kwargs: Any,
) -> Any:  # fmt: skip
    """`retrieval.build.load_or_build_searcher` with a retriever / index dict."""
    from densex.retrieval.build import load_or_build_searcher as build

    return build(units_path, retriever_spec(retriever), index_spec(index), cache_dir,
                 trainer_args, **kwargs)  # fmt: skip


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

"""Typed views of the `conf/propositionizer` groups (read with `utils.config.from_config`).

Each class states its keys' defaults as in the YAML files: what every backend shares, the
seq2seq model backend's options, and the LLM teacher's options beyond the `Teacher` arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ModelSettings", "PropositionizerSettings", "TeacherSettings"]


@dataclass(frozen=True)
class PropositionizerSettings:
    """What every `conf/propositionizer` backend shares (defaults as in its YAML files)."""

    type: str = "model"
    fallback: str = "sentences"
    on_error: str = "raise"
    spacy_model: str = "en_core_web_lg"


@dataclass(frozen=True)
class ModelSettings(PropositionizerSettings):
    """The seq2seq backend's options (`conf/propositionizer/model.yaml`)."""

    model: str = ""
    dtype: str = "auto"
    batch_size: int = 8
    max_source_length: int = 512
    max_new_tokens: int = 512
    num_beams: int = 1
    shard_size: int = 256


@dataclass(frozen=True)
class TeacherSettings:
    """`conf/propositionizer/teacher.yaml` beyond the `Teacher` arguments: prices, fallback."""

    prices: Mapping[str, float] | None = None
    fallback: str = "sentences"
    spacy_model: str = "en_core_web_lg"

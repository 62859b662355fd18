"""The teacher backend: distil a passages file through an LLM teacher (`teacher.Teacher`) into
the standard propositions file and its manifest (`output.write_propositions`), with the run's
token usage, cost and reply counts.
"""

from __future__ import annotations

import inspect
import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from densex.propositionizer.output import NO_SKIPS, write_propositions
from densex.propositionizer.settings import TeacherSettings
from densex.propositionizer.teacher import Teacher, TeacherReply, redact_url
from densex.utils.cache import hash_file
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

__all__ = ["generate_with_teacher", "teacher_from_settings"]

# config key -> `Teacher` argument where the names differ
_TEACHER_ARGS = {"prompt": "prompt_path"}
_NOT_FROM_CONFIG = {"model", "sleep", "limits", "price_prompt_per_1m", "price_completion_per_1m"}


def teacher_from_settings(opts: TeacherSettings, default_cache_dir: str | os.PathLike) -> Teacher:
    """A `Teacher` from the teacher's settings: the non-null ones that name `Teacher`
    arguments (`prompt` for `prompt_path`, `prices.*_per_1m`; `api_key_env` even when null: no
    key, a local server); `cache_dir` falls back to `default_cache_dir`."""
    if opts.model in (None, "???"):
        raise ValueError("propositionizer.model (the teacher's model name) is required")
    kwargs: dict[str, Any] = {"cache_dir": default_cache_dir}
    for name in inspect.signature(Teacher).parameters:
        key = next((k for k, v in _TEACHER_ARGS.items() if v == name), name)
        value = getattr(opts, key, None)
        if name not in _NOT_FROM_CONFIG and value is not None:
            kwargs[name] = value
    kwargs["api_key_env"] = opts.api_key_env
    prices = opts.prices or {}
    return Teacher(
        **kwargs,
        model=str(opts.model),
        price_prompt_per_1m=float(prices.get("prompt_per_1m", 0.0) or 0.0),
        price_completion_per_1m=float(prices.get("completion_per_1m", 0.0) or 0.0),
        limits=opts.limits(),
    )


def generate_with_teacher(
    passages: Sequence[Record],
    passages_path: str | os.PathLike,
    opts: TeacherSettings,
    out_path: str | os.PathLike,
    skipped: Record | None = None,
) -> Path:
    """Ask the teacher about every passage and write the standard propositions file + manifest
    (`skipped`: the passage reader's `Skips.summary()`, recorded as is)."""
    out_path = Path(out_path)
    teacher = teacher_from_settings(opts, default_cache_dir=out_path.parent / "teacher_cache")
    t0 = time.perf_counter()
    replies = teacher.replies(passages)
    seconds = time.perf_counter() - t0
    write_propositions(
        passages,
        [r.content if r.bad is None else None for r in replies],  # bad: the fallback
        out_path,
        fallback=opts.fallback,
        spacy_model=opts.spacy_model,
        limits=teacher.limits,
        **_manifest(teacher, replies, passages_path, skipped, seconds),
    )
    new_p, new_c = _tokens(r for r in replies if not r.cached)
    log.info(
        "teacher %s: %d API replies, %d cache hits, %d retries; %d+%d tokens, $%.4f",
        teacher.model,
        teacher.counts["api_replies"],
        teacher.counts["cache_hits"],
        teacher.counts["retries"],
        new_p,
        new_c,
        teacher.cost(new_p, new_c),
    )
    return out_path


def _tokens(replies: Iterable[TeacherReply]) -> tuple[int, int]:
    """(prompt, completion) tokens summed over `replies`."""
    p = c = 0
    for r in replies:
        p, c = p + r.prompt_tokens, c + r.completion_tokens
    return p, c


def _manifest(
    teacher: Teacher,
    replies: Sequence[TeacherReply],
    passages_path: str | os.PathLike,
    skipped: Record | None,
    seconds: float,
) -> dict[str, Any]:
    """The teacher run's manifest fields: settings, inputs, request counts, tokens and cost
    (this run's API replies, and including cache hits)."""
    new_p, new_c = _tokens(r for r in replies if not r.cached)
    all_p, all_c = _tokens(replies)
    return {
        "type": "teacher",
        "model": teacher.model,
        "base_url": redact_url(teacher.base_url),
        "cache_namespace": teacher.namespace,
        "api_key_env": teacher.api_key_env,
        "prompt": {"path": str(teacher.prompt_path), "sha256": teacher.template_sha256},
        "settings": {
            "temperature": teacher.temperature,
            "max_tokens": teacher.max_tokens,
            "max_concurrency": teacher.max_concurrency,
            "max_retries": teacher.max_retries,
        },
        "passages_file": str(passages_path),
        "passages_sha256": hash_file(passages_path),
        "cache_dir": str(teacher.cache_dir),
        "requests": dict(teacher.counts),
        "hit_max_tokens": sum(r.finish_reason == "length" for r in replies),
        "bad_replies": {
            "final": sum(r.bad is not None for r in replies),
            "reasons": dict(Counter(r.bad for r in replies if r.bad is not None)),
        },
        "skipped": dict(skipped or NO_SKIPS),
        "tokens": {"prompt": new_p, "completion": new_c},
        "cost_usd": round(teacher.cost(new_p, new_c), 6),
        "tokens_including_cache": {"prompt": all_p, "completion": all_c},
        "cost_usd_including_cache": round(teacher.cost(all_p, all_c), 6),
        "prices_per_1m": {"prompt": teacher.prices[0], "completion": teacher.prices[1]},
        "seconds": round(seconds, 3),
    }

"""An LLM teacher behind any OpenAI-compatible chat API (the paper's GPT-4 with its Figure 8
prompt): `Teacher` asks about one passage at a time, caches every good reply on disk and retries
rate limits, server errors and bad replies. The distillation run that writes the propositions
file is `teacher_backend.py`. Cache key, endpoint naming, retry policy and key handling:
docs/architecture.md, "Design notes: the LLM teacher".

Why this module is long: `Teacher` is one class whose client, cache, retry and counting
methods share the same state (the lazily built client and its key, the lock, the request
counters, the back-off generator and the settings that make up the cache key); split across
modules, each part would reach into the others' private state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from densex.propositionizer.output import passage_source
from densex.propositionizer.parse import ParseLimits, parse_propositions
from densex.propositionizer.prompt import default_prompt_path, fill_prompt, load_template
from densex.utils.integrity import remove_orphans
from densex.utils.io import DataError, read_json, write_json
from densex.utils.logging import get_logger
from densex.utils.records import Record
from densex.utils.secrets import redact_text, secret_values

log = get_logger(__name__)

__all__ = ["Teacher", "TeacherError", "TeacherReply", "endpoint_id", "redact_url"]

_RETRY_STATUS = {408, 409, 429}
# finish reasons of a complete (cacheable) reply: OpenAI's stop/length and TGI's synonyms
OK_FINISH_REASONS = ("stop", "length", "eos_token", "stop_sequence")
OPENAI_BASE_URL = "https://api.openai.com/v1"


class TeacherError(RuntimeError):
    """The API refused or kept failing after all retries."""


def redact_url(url: str | None) -> str | None:
    """Drop user:password@ and the query string from a URL before it is written anywhere."""
    if not url:
        return url
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def endpoint_id(base_url: str | None) -> str:
    """The endpoint a reply came from, for the cache key: the redacted URL (no credentials,
    no query, no trailing slash); None is what the openai client then uses (`OPENAI_BASE_URL`,
    else the OpenAI API)."""
    url = base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
    return (redact_url(url) or "").rstrip("/")


@dataclass(frozen=True)
class TeacherReply:
    """One passage's reply: its text, token usage, finish reason, whether it came from the
    cache, and why it is unusable (`bad`; such a reply is never cached)."""

    content: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    cached: bool = False
    bad: str | None = None  # why the reply is unusable (never cached), e.g. "empty content"


class Teacher:
    """A cached, rate-limit-tolerant client for one (base_url, model, prompt template)."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        prompt_path: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike = ".cache/teacher",
        max_concurrency: int = 8,
        max_retries: int = 6,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        timeout: float = 120.0,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        price_prompt_per_1m: float = 0.0,
        price_completion_per_1m: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        seed: int | None = None,
        cache_namespace: str | None = None,
        ok_finish_reasons: Sequence[str | None] = OK_FINISH_REASONS,
        limits: ParseLimits | None = None,
    ):
        self.model = model
        # replies beyond these caps (size, nesting, count) are bad: retried, never cached
        self.limits = limits or ParseLimits()
        self.base_url = base_url
        # what separates cache entries of different servers serving the same model name
        self.namespace = str(cache_namespace) if cache_namespace else endpoint_id(base_url)
        self.ok_finish_reasons = frozenset(ok_finish_reasons)
        self.api_key_env = api_key_env
        self.prompt_path = Path(prompt_path) if prompt_path else default_prompt_path()
        self.template = load_template(self.prompt_path)
        self.template_sha256 = hashlib.sha256(self.template.encode("utf-8")).hexdigest()
        self.cache_dir = Path(cache_dir)
        # replies a killed run was writing (`xx/.key.json.<host>-<pid>.*.tmp`): names only
        remove_orphans(self.cache_dir, depth=1)
        self.max_concurrency = max(1, int(max_concurrency))
        self.max_retries = int(max_retries)
        self.backoff_base, self.backoff_max = float(backoff_base), float(backoff_max)
        self.timeout = float(timeout)
        self.temperature, self.max_tokens = float(temperature), int(max_tokens)
        self.prices = (float(price_prompt_per_1m), float(price_completion_per_1m))
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._client = None
        self._key: str | None = None
        self.counts = {
            "requests": 0,
            "retries": 0,
            "api_replies": 0,
            "cache_hits": 0,
            "bad_replies": 0,  # replies retried or given up on (empty, filtered, no choices)
            "bad_final": 0,  # passages whose every attempt was bad: fallback, not cached
        }

    # -- client -------------------------------------------------------------------------
    def client(self):
        """The openai client, with its own retries off (the policy is `_complete`'s)."""
        if self._client is None:
            try:
                from openai import OpenAI
            except ImportError as e:  # pragma: no cover - depends on extras
                raise ImportError(
                    "propositionizer=teacher needs `pip install 'densex[llm]'`"
                ) from e
            if self.api_key_env:
                key = os.environ.get(self.api_key_env)
                if not key:
                    raise TeacherError(
                        f"environment variable {self.api_key_env} is not set (the API key)"
                    )
            else:
                key = "EMPTY"  # local vLLM/TGI servers accept any key
            self._key = key if key != "EMPTY" else None
            self._client = OpenAI(
                api_key=key, base_url=self.base_url, max_retries=0, timeout=self.timeout
            )
        return self._client

    # -- cache --------------------------------------------------------------------------
    @property
    def generation(self) -> dict[str, Any]:
        """The request settings that change a reply: a reply cut at 1024 tokens must not answer
        for `max_tokens: 4096`. (`seed` only seeds the back-off jitter and is not sent.)"""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}

    def cache_key(self, source: str) -> str:
        """The cache key of `source`'s reply: SHA-256 over the endpoint namespace, the model, the
        template's hash, `generation` and the source itself."""
        blob = json.dumps(
            [self.namespace, self.model, self.template_sha256, self.generation, source],
            ensure_ascii=False,
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _cache_path(self, key: str) -> Path:
        return self.cache_dir / key[:2] / f"{key}.json"

    def _cached(self, key: str) -> TeacherReply | None:
        path = self._cache_path(key)
        if not path.exists():
            return None
        try:
            entry = read_json(path)
            usage = entry.get("usage") or {}
            return TeacherReply(
                str(entry["content"]),
                int(usage.get("prompt_tokens", 0)),
                int(usage.get("completion_tokens", 0)),
                entry.get("finish_reason"),
                cached=True,
            )
        except (DataError, KeyError, TypeError, ValueError, AttributeError) as e:
            log.warning("ignoring a corrupt cache entry %s (%s)", path, e)
            return None

    def _store(self, key: str, source: str, reply: TeacherReply) -> None:
        write_json(
            self._cache_path(key),
            {
                "endpoint": self.namespace,
                "model": self.model,
                "template_sha256": self.template_sha256,
                "generation": self.generation,
                "source": source,
                "content": reply.content,
                "finish_reason": reply.finish_reason,
                "usage": {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                },
            },
        )

    # -- requests -----------------------------------------------------------------------
    def _delay(self, attempt: int, error: Exception) -> float:
        """Exponential back-off with equal jitter; a server's Retry-After is honoured (capped)."""
        d = min(self.backoff_max, self.backoff_base * (2**attempt))
        with self._lock:
            d = d / 2 + self._rng.uniform(0, d / 2)
        response = getattr(error, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after:
            with contextlib.suppress(ValueError):
                d = max(d, min(self.backoff_max, float(retry_after)))
        return d

    def _check(self, resp: Any) -> tuple[TeacherReply, str | None]:
        """The reply in `resp` and why it is unusable (None when it is fine)."""
        choices = getattr(resp, "choices", None)
        choice = choices[0] if choices else None
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None) or ""
        finish = getattr(choice, "finish_reason", None)
        usage = getattr(resp, "usage", None)
        reply = TeacherReply(
            content,
            int(getattr(usage, "prompt_tokens", 0) or 0),
            int(getattr(usage, "completion_tokens", 0) or 0),
            finish,
        )
        if choice is None:
            return reply, "no choices"
        if not content.strip():
            return reply, "empty content"
        if finish not in self.ok_finish_reasons:
            return reply, f"finish_reason={finish!r}"
        parsed = parse_propositions(content, self.limits)
        if parsed.rejected:
            return reply, f"rejected: {parsed.rejected}"
        return reply, None

    def _raise(self, message: str, cause: BaseException) -> None:
        """Raise `TeacherError(message)`: chained to the provider's error only when that error's
        text holds no secret (a 401 body may echo the key); else with the text redacted."""
        text = str(cause)
        secrets = [s for s in (self._key, *secret_values()) if s]
        if any(s in text for s in secrets) or redact_text(text) != text:
            detail = redact_text(text, extra=secrets)
            raise TeacherError(f"{message}: {detail}") from None
        raise TeacherError(f"{message}: {text}") from cause

    def _complete(self, prompt: str) -> TeacherReply:
        import openai  # the optional `llm` extra; `client()` has already said how to install it

        for attempt in range(self.max_retries + 1):
            with self._lock:
                self.counts["requests"] += 1
            try:
                resp = self.client().chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": prompt}],
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                )
            except (openai.APIConnectionError, openai.APIStatusError) as e:
                status = getattr(e, "status_code", None)
                retryable = status is None or status in _RETRY_STATUS or status >= 500
                what = f"{type(e).__name__}" + (f" (HTTP {status})" if status else "")
                if not retryable:
                    self._raise(f"{self.model}: {what}; not retried", e)
                if attempt == self.max_retries:
                    self._raise(f"{self.model}: {what} after {attempt + 1} attempts", e)
                delay = self._delay(attempt, e)
                log.warning("%s; retry %d/%d in %.2fs", what, attempt + 1, self.max_retries, delay)
                with self._lock:
                    self.counts["retries"] += 1
                self._sleep(delay)
                continue
            reply, bad = self._check(resp)
            with self._lock:
                self.counts["api_replies"] += 1
                self.counts["bad_replies"] += bad is not None
            if bad is None:
                return reply
            if attempt == self.max_retries:
                log.warning(
                    "%s: bad reply (%s) after %d attempts; the passage falls back, uncached",
                    self.model,
                    bad,
                    attempt + 1,
                )
                with self._lock:
                    self.counts["bad_final"] += 1
                return dataclasses.replace(reply, bad=bad)
            delay = self._delay(attempt, ValueError(bad))
            log.warning(
                "bad reply (%s); retry %d/%d in %.2fs", bad, attempt + 1, self.max_retries, delay
            )
            with self._lock:
                self.counts["retries"] += 1
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def reply(self, passage: Record) -> TeacherReply:
        """The teacher's reply for one passage: from the cache, else from the API (then cached,
        unless it is bad: see `_check`)."""
        source = passage_source(passage)
        key = self.cache_key(source)
        hit = self._cached(key)
        if hit is not None:
            with self._lock:
                self.counts["cache_hits"] += 1
            return hit
        try:
            reply = self._complete(fill_prompt(self.template, passage))
        except TeacherError as e:
            cause = e.__cause__
            raise TeacherError(f"passage {passage.get('id')!r}: {e}") from cause
        if reply.bad is None:
            self._store(key, source, reply)
        return reply

    def replies(self, passages: Sequence[Record]) -> list[TeacherReply]:
        """Replies for all passages, `max_concurrency` requests in flight; order preserved.

        On a failure the requests not yet started are cancelled; finished ones stay cached.
        """
        out: list[TeacherReply | None] = [None] * len(passages)
        done = 0
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            futures = {pool.submit(self.reply, p): i for i, p in enumerate(passages)}
            try:
                for fut in as_completed(futures):
                    out[futures[fut]] = fut.result()
                    done += 1
                    if done % 100 == 0 or done == len(passages):
                        log.info("teacher: %d/%d passages", done, len(passages))
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return out  # type: ignore[return-value]

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """US dollars for these token counts at the configured per-million prices."""
        return (prompt_tokens * self.prices[0] + completion_tokens * self.prices[1]) / 1e6

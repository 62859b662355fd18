"""Turn a propositionizer's raw output into a list of propositions, within limits.

`parse_propositions` refuses untrusted output beyond `ParseLimits` (too long, too deeply
nested, too many items), finds the list with `repair.recover_list` (strict JSON first, then
repairs), keeps the non-empty strings (whitespace collapsed) and counts what it dropped.
What cannot be recovered is never dropped silently: see `resolve.py` (fallbacks, counts).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from densex.propositionizer.repair import recover_list

__all__ = ["ParseLimits", "ParseResult", "nesting_depth", "parse_propositions"]


@dataclass
class ParseLimits:
    """Caps on untrusted output (a teacher's reply, a model's generation); config values.

    A reply longer than `max_reply_chars`, nested deeper than `max_depth` brackets, or with more
    than `max_propositions` items is rejected whole (`ParseResult.rejected`: the fallback
    stands in and a teacher never caches it); a proposition of more than
    `max_proposition_words` words is dropped (counted). The parser itself never recurses.
    """

    max_reply_chars: int = 100_000
    max_depth: int = 32
    max_propositions: int = 256
    max_proposition_words: int = 200

    def limits(self) -> ParseLimits:
        """The caps alone (a propositionizer's settings inherit them)."""
        return ParseLimits(
            **{f.name: int(getattr(self, f.name)) for f in dataclasses.fields(ParseLimits)}
        )


_NEST = re.compile(r'"(?:[^"\\]|\\.)*"|"|[\[\]{}]')


def nesting_depth(s: str, stop_above: int | None = None) -> int:
    """Deepest bracket (`[`/`{`) nesting outside double-quoted strings, without recursion;
    stops counting once it exceeds `stop_above`."""
    depth = deepest = 0
    for m in _NEST.finditer(s):
        tok = m.group()
        if tok == '"':  # an unterminated string: the rest is text
            break
        if tok in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        elif tok in "]}":
            depth = max(0, depth - 1)
    return deepest


@dataclass(frozen=True)
class ParseResult:
    """What one raw output yielded.

    `ok`: a list was recovered (possibly empty); `repaired`: it needed more than strict JSON;
    `repairs`: which faults were fixed; `dropped`: list items that were not non-empty strings.
    """

    propositions: list[str]
    ok: bool
    repaired: bool
    error: str | None = None
    dropped: int = 0
    repairs: tuple[str, ...] = ()
    rejected: str | None = None  # too_long | too_deep | too_many: refused whole (see ParseLimits)
    too_long_items: int = 0  # propositions dropped for exceeding max_proposition_words


def _clean_items(items: list[Any]) -> tuple[list[str], int]:
    """Keep non-empty strings (whitespace collapsed); count everything else as dropped."""
    kept: list[str] = []
    for item in items:
        if isinstance(item, str) and item.strip():
            kept.append(" ".join(item.split()))
    return kept, len(items) - len(kept)


def parse_propositions(text: str | None, limits: ParseLimits | None = None) -> ParseResult:
    """Parse a model's output into propositions: strict JSON, then repairs, else not ok;
    untrusted output beyond `limits` (default `ParseLimits()`) is rejected (see there).

    Repair kinds reported in `repairs`: fence, prefix, suffix, object, trailing_comma,
    single_quotes, unescaped_quotes, missing_comma, truncated, bullets.
    """
    limits = limits or ParseLimits()
    if text is not None and len(text) > limits.max_reply_chars:
        return _rejected("too_long", f"{len(text)} characters > max_reply_chars")
    s = (text or "").strip().lstrip("\ufeff").strip()
    if not s:
        return ParseResult([], ok=False, repaired=False, error="empty output")
    depth = nesting_depth(s, stop_above=limits.max_depth)
    if depth > limits.max_depth:
        return _rejected("too_deep", f"brackets nested over {limits.max_depth} deep")
    return _apply_limits(_finish(recover_list(s)), limits)


def _rejected(kind: str, why: str) -> ParseResult:
    return ParseResult([], ok=False, repaired=False, error=f"rejected: {why}", rejected=kind)


def _apply_limits(result: ParseResult, limits: ParseLimits) -> ParseResult:
    if not result.ok:
        return result
    kept = [p for p in result.propositions if len(p.split()) <= limits.max_proposition_words]
    too_long = len(result.propositions) - len(kept)
    if len(kept) > limits.max_propositions:
        return _rejected("too_many", f"{len(kept)} propositions > max_propositions")
    if too_long:
        return dataclasses.replace(
            result, propositions=kept, too_long_items=too_long, dropped=result.dropped + too_long
        )
    return result


def _finish(found: tuple[list[Any], list[str]] | None) -> ParseResult:
    """The result for `recover_list`'s answer: its cleaned items, or not ok."""
    if found is None:
        return ParseResult([], ok=False, repaired=False, error="no JSON list or bullet items found")
    items, repairs = found
    props, dropped = _clean_items(items)
    return ParseResult(
        props,
        ok=True,
        repaired=bool(repairs),
        dropped=dropped,
        repairs=tuple(dict.fromkeys(repairs)),
    )

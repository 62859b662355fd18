"""Turn a propositionizer's raw output into a list of propositions, repairing what can be repaired.

Models are asked for a JSON list of strings (the paper's Figure 8), but real outputs break
that contract in a handful of recurring ways: Markdown code fences, an ``Output:`` label or a
chatty sentence around the list, trailing commas, Python-style single quotes, unescaped inner
quotes, and lists cut off by the generation length limit. `parse_propositions` tries strict
JSON first, then a lenient scanner that keeps every *complete* string, then bullet lists.
What cannot be recovered is never dropped silently: `resolve_output` replaces it with a
configured fallback (the passage's sentences, the passage itself, or nothing) and
`ParseStats` counts every repair, dropped item and fallback for the manifest.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FALLBACK_MODES",
    "ParseLimits",
    "ParseResult",
    "ParseStats",
    "Resolved",
    "SentenceSplitter",
    "fallback_propositions",
    "nesting_depth",
    "parse_propositions",
    "resolve_output",
]

FALLBACK_MODES = ("sentences", "passage", "empty")

_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*\u2022\u2013]|\d{1,3}[.)])\s+(.+?)\s*$")
_DELIM = re.compile(r"[,\]]")
_MAX_CANDIDATES = 50  # '[' positions tried before giving up (bounded work on long garbage)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\"}


@dataclass(frozen=True)
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

    @classmethod
    def from_cfg(cls, cfg: Any) -> ParseLimits:
        """From a propositionizer config (missing or null keys keep the defaults)."""
        kwargs = {}
        for f in dataclasses.fields(cls):
            value = cfg.get(f.name) if cfg is not None else None
            if value is not None:
                kwargs[f.name] = int(value)
        return cls(**kwargs)


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


def _unescape(raw: str) -> str:
    """Decode backslash escapes the way JSON (and Python, for \\') would."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        ch = raw[i]
        if ch != "\\" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", raw[i + 2 : i + 6]):
            out.append(chr(int(raw[i + 2 : i + 6], 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))  # \" \' and unknown escapes keep the character
            i += 2
    # join surrogate pairs written as two \u escapes
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _read_string(s: str, i: int) -> tuple[str | None, int, bool]:
    """Read a quoted string starting at s[i]; return (value, next index, unescaped_inner_quote).

    A quote closes the string only when followed by `,`, `]`, another quote or the end of the
    text, so an unescaped inner quote (`"he said "hi" to"`) or an apostrophe in a single-quoted
    string (`'a hare's scratch'`) stays inside. Value None: the text ended inside the string.
    """
    quote, j, n = s[i], i + 1, len(s)
    inner = False
    while j < n:
        ch = s[j]
        if ch == "\\":
            j += 2
            continue
        if ch == quote:
            k = j + 1
            while k < n and s[k].isspace():
                k += 1
            if k >= n or s[k] in ",]\"'":
                return _unescape(s[i + 1 : j]), j + 1, inner
            inner = True
        j += 1
    return None, n, inner


def _json_string_spans(s: str, start: int, end: int) -> list[tuple[int, int]]:
    """The (open, close + 1) spans of the double-quoted strings in valid JSON s[start:end]."""
    spans: list[tuple[int, int]] = []
    i = s.find('"', start, end)
    while i != -1:
        j = i + 1
        while j < end and s[j] != '"':
            j += 2 if s[j] == "\\" else 1
        spans.append((i, min(j + 1, end)))
        i = s.find('"', j + 1, end)
    return spans


def _scan_list(
    s: str, start: int, spans: list[tuple[int, int]] | None = None
) -> tuple[list[Any], int, set[str], bool]:
    """Leniently read the list opening at s[start]; return (items, end, repairs, found_any).

    Complete strings are kept; a string cut off by the end of the text is discarded (the list
    was truncated); other values (numbers, objects, bare words) become placeholders to drop.
    The span of every string read (a cut-off one runs to the end) is appended to `spans`, so
    the caller never restarts inside one: `["The album ['Live'` is text, not a list.
    """
    items: list[Any] = []
    repairs: set[str] = set()
    spans = [] if spans is None else spans
    i, n = start + 1, len(s)
    last_comma = False
    while i < n:
        ch = s[i]
        if ch.isspace():
            i += 1
        elif ch == ",":
            last_comma = True
            i += 1
        elif ch == "]":
            if last_comma and items:
                repairs.add("trailing_comma")
            return items, i + 1, repairs, True
        elif ch in "\"'":
            if items and not last_comma:
                repairs.add("missing_comma")
            opened = i
            value, i, inner = _read_string(s, i)
            spans.append((opened, i))
            if value is None:
                repairs.add("truncated")
                return items, n, repairs, bool(items)
            if ch == "'":
                repairs.add("single_quotes")
            if inner:
                repairs.add("unescaped_quotes")
            items.append(value)
            last_comma = False
        else:
            try:
                value, j = _DECODER.raw_decode(s, i)
                spans += _json_string_spans(s, i, j)
                i = j
            except (json.JSONDecodeError, RecursionError):
                m = _DELIM.search(s, i)
                value, i = None, (m.start() if m else n)
            items.append(_Dropped(value))
            last_comma = False
    repairs.add("truncated")
    return items, n, repairs, bool(items)


class _Dropped:
    """A non-string list item (kept as a placeholder so it is counted, never returned)."""

    def __init__(self, value: Any):
        self.value = value


def _from_object(value: dict) -> list[Any] | None:
    """`{"propositions": [...]}` and similar single-list wrappers some LLMs produce."""
    lists = [v for v in value.values() if isinstance(v, list)]
    return lists[0] if len(lists) == 1 else None


def _bullets(text: str) -> list[str]:
    items = []
    for line in text.splitlines():
        m = _BULLET.match(line)
        if m:
            items.append(m.group(1).rstrip(",").strip().strip("\"'\u201c\u201d"))
    return items


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
    return _apply_limits(_parse(s), limits)


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


def _parse(s: str) -> ParseResult:
    try:
        value = json.loads(s)
    except (json.JSONDecodeError, RecursionError):
        value = None
    else:
        if isinstance(value, list):
            props, dropped = _clean_items(value)
            return ParseResult(props, ok=True, repaired=False, dropped=dropped)
        if isinstance(value, dict) and (inner := _from_object(value)) is not None:
            props, dropped = _clean_items(inner)
            return ParseResult(props, ok=True, repaired=True, dropped=dropped, repairs=("object",))

    base: list[str] = []
    body = s
    fence = _FENCE.search(s)
    if fence and fence.group(1).strip():
        body, base = fence.group(1).strip(), ["fence"]

    first_list: tuple[list[Any], list[str]] | None = None
    spans: list[tuple[int, int]] = []  # strings already read: a '[' inside one is text
    tried = 0
    for m in re.finditer(r"\[", body):
        pos = m.start()
        if any(a < pos < b for a, b in spans):
            continue
        tried += 1
        if tried > _MAX_CANDIDATES:
            break
        repairs = list(base)
        try:
            items, end = _DECODER.raw_decode(body, pos)
            strict = found = isinstance(items, list)
        except (json.JSONDecodeError, RecursionError):
            strict = found = False
        if found:
            spans += _json_string_spans(body, pos, end)
        else:
            items, end, fixes, found = _scan_list(body, pos, spans)
            repairs += sorted(fixes)
        if not found:
            continue
        if body[:pos].strip():
            repairs.append("prefix")
        if body[end:].strip():
            repairs.append("suffix")
        if any(isinstance(x, str) and x.strip() for x in items):
            return _finish(items, repairs)
        if strict and first_list is None:  # a real JSON list without strings, e.g. []
            first_list = (items, repairs)
    if first_list is not None:
        return _finish(*first_list)

    bullets = _bullets(body)
    if bullets:
        return _finish(bullets, [*base, "bullets"])
    return ParseResult([], ok=False, repaired=False, error="no JSON list or bullet items found")


def _finish(items: list[Any], repairs: list[str]) -> ParseResult:
    props, dropped = _clean_items(items)
    return ParseResult(
        props,
        ok=True,
        repaired=bool(repairs),
        dropped=dropped,
        repairs=tuple(dict.fromkeys(repairs)),
    )


class SentenceSplitter:
    """spaCy sentence splitting for fallbacks, loaded on first use (most runs never need it).

    Uses `densex.corpus.segment.load_sentencizer`, i.e. `spacy_model` when installed, else
    spaCy's rule-based sentencizer, the same splitter as the sentence units.
    """

    def __init__(self, spacy_model: str | None = "en_core_web_lg"):
        self.spacy_model = spacy_model
        self._nlp = None

    def __call__(self, text: str) -> list[str]:
        # lazy: spaCy (~2 s) is needed only when an output falls back to sentences
        from densex.corpus.segment import load_sentencizer, split_sentences

        if self._nlp is None:
            self._nlp = load_sentencizer(self.spacy_model or "")
        return split_sentences(text, self._nlp)


def fallback_propositions(
    passage_text: str, mode: str, split: Callable[[str], list[str]] | None = None
) -> list[str]:
    """What stands in for an unrecoverable output: sentences, the passage, or nothing."""
    if mode == "sentences":
        sentences = (split or SentenceSplitter())(passage_text)
        return sentences or ([passage_text.strip()] if passage_text.strip() else [])
    if mode == "passage":
        return [passage_text.strip()] if passage_text.strip() else []
    if mode == "empty":
        return []
    raise ValueError(f"unknown fallback {mode!r}; expected one of {FALLBACK_MODES}")


@dataclass(frozen=True)
class Resolved:
    """The propositions kept for one passage and how they were obtained."""

    propositions: list[str]
    result: ParseResult
    fallback: str | None = None  # the fallback mode used, if any
    reason: str | None = None  # why: "unparseable" | "empty" | "rejected"


def resolve_output(
    raw: str | None,
    passage_text: str,
    fallback: str = "sentences",
    split: Callable[[str], list[str]] | None = None,
    limits: ParseLimits | None = None,
) -> Resolved:
    """Parse `raw` (within `limits`); if nothing usable comes out, use the fallback (and say
    why)."""
    if fallback not in FALLBACK_MODES:
        raise ValueError(f"unknown fallback {fallback!r}; expected one of {FALLBACK_MODES}")
    result = parse_propositions(raw, limits)
    if result.ok and result.propositions:
        return Resolved(result.propositions, result)
    reason = "rejected" if result.rejected else "unparseable" if not result.ok else "empty"
    return Resolved(fallback_propositions(passage_text, fallback, split), result, fallback, reason)


@dataclass
class ParseStats:
    """Counts for the manifest. parsed_strict + repaired + unparseable == passages."""

    passages: int = 0
    parsed_strict: int = 0
    repaired: int = 0
    unparseable: int = 0
    items_dropped: int = 0
    propositions: int = 0
    repairs: Counter = field(default_factory=Counter)
    fallbacks: Counter = field(default_factory=Counter)
    fallback_reasons: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)  # by kind: too_long|too_deep|too_many
    too_long_items: int = 0

    def add(self, r: Resolved) -> None:
        self.passages += 1
        self.parsed_strict += int(r.result.ok and not r.result.repaired)
        self.repaired += int(r.result.ok and r.result.repaired)
        self.unparseable += int(not r.result.ok)
        self.items_dropped += r.result.dropped
        self.propositions += len(r.propositions)
        self.repairs.update(r.result.repairs)
        self.too_long_items += r.result.too_long_items
        if r.result.rejected:
            self.rejected[r.result.rejected] += 1
        if r.fallback is not None:
            self.fallbacks[r.fallback] += 1
            self.fallback_reasons[r.reason] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "passages": self.passages,
            "parsed_strict": self.parsed_strict,
            "repaired": self.repaired,
            "unparseable": self.unparseable,
            # share of outputs that parsed as a JSON list (strictly or after repair)
            "parse_rate": (self.parsed_strict + self.repaired) / self.passages
            if self.passages
            else 0.0,
            "fallbacks": dict(sorted(self.fallbacks.items())),
            "fallback_total": sum(self.fallbacks.values()),
            "fallback_reasons": dict(sorted(self.fallback_reasons.items())),
            "repairs": dict(sorted(self.repairs.items())),
            "items_dropped": self.items_dropped,
            "rejected": dict(sorted(self.rejected.items())),
            "rejected_total": sum(self.rejected.values()),
            "too_long_items": self.too_long_items,
            "propositions": self.propositions,
        }

"""Find a JSON list of strings in a model's raw output, repairing what can be repaired.

Models are asked for a JSON list of strings (the paper's Figure 8), but real outputs break
that contract in a handful of recurring ways: Markdown code fences, an ``Output:`` label or a
chatty sentence around the list, trailing commas, Python-style single quotes, unescaped inner
quotes, and lists cut off by the generation length limit. `recover_list` tries strict JSON
first, then a lenient scanner that keeps every *complete* string, then bullet lists; it
returns the raw items and the repairs it needed. Limits and cleaning are `parse.py`'s.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["recover_list"]

_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*\u2022\u2013]|\d{1,3}[.)])\s+(.+?)\s*$")
_DELIM = re.compile(r"[,\]]")
_MAX_CANDIDATES = 50  # '[' positions tried before giving up (bounded work on long garbage)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\"}


def recover_list(s: str) -> tuple[list[Any], list[str]] | None:
    """The list in the stripped, non-empty output `s` and the repairs it needed, in order
    (strict JSON: none), or None when neither a list nor bullet items are found. Items are
    raw: non-strings stay in (placeholders for unreadable values) so that they are counted.

    Repair kinds: fence, prefix, suffix, object, trailing_comma, single_quotes,
    unescaped_quotes, missing_comma, truncated, bullets.
    """
    try:
        value = json.loads(s)
    except (json.JSONDecodeError, RecursionError):
        value = None
    else:
        if isinstance(value, list):
            return value, []
        if isinstance(value, dict) and (inner := _from_object(value)) is not None:
            return inner, ["object"]

    base: list[str] = []
    body = s
    fence = _FENCE.search(s)
    if fence and fence.group(1).strip():
        body, base = fence.group(1).strip(), ["fence"]

    found = _first_list(body, base)
    if found is not None:
        return found
    bullets = _bullets(body)
    if bullets:
        return bullets, [*base, "bullets"]
    return None


def _first_list(body: str, base: list[str]) -> tuple[list[Any], list[str]] | None:
    """The first list in `body` holding a non-empty string, else the first strict JSON list
    (e.g. `[]`), else None; with its repairs after `base`. At most `_MAX_CANDIDATES` `[`
    positions are tried, never one inside a string already read."""
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
            return items, repairs
        if strict and first_list is None:  # a real JSON list without strings, e.g. []
            first_list = (items, repairs)
    return first_list


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

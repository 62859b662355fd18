"""The service's inputs, validated: every bad one is a `BadRequest` with a one-line reason.

Contract: `parse_get(params, limits, granularities)` reads `GET /search?q=&k=&granularity=`,
`parse_post(body, limits, granularities)` reads `POST /search` (`{"queries": [...] | "query":
"...", "k": int, "granularity": str}`); both return a `SearchRequest` or raise `BadRequest(
status, reason)`: 400 for an empty or missing query, a `k` that is not an integer in
1..`max_k`, an unknown granularity, malformed JSON or a body of the wrong shape; 413 for a
query longer than `max_query_chars`, more than `max_request_queries` queries or a body over
`max_body_bytes`. Nothing here touches the index.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from densex.pipelines.specs import ServeSpec


class BadRequest(ValueError):
    """A client error: HTTP `status` and a one-line `reason`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, " ".join(reason.split())


@dataclass
class SearchRequest:
    queries: list[str]
    k: int
    granularity: str


def _k(value: Any, limits: ServeSpec) -> int:
    if value is None or value == "":
        return limits.default_k
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadRequest(400, f"k must be an integer in 1..{limits.max_k}, got {value!r}")
    try:
        k = int(value)
    except ValueError:
        raise BadRequest(
            400, f"k must be an integer in 1..{limits.max_k}, got {value!r:.40}"
        ) from None
    if not 1 <= k <= limits.max_k:
        raise BadRequest(400, f"k must be in 1..{limits.max_k}, got {k}")
    return k


def _granularity(value: Any, granularities: Sequence[str]) -> str:
    if value is None or value == "":
        return granularities[0]
    if not isinstance(value, str) or value not in granularities:
        raise BadRequest(
            400, f"unknown granularity {str(value)[:40]!r}; served: {', '.join(granularities)}"
        )
    return value


def _query(value: Any, limits: ServeSpec, where: str = "q") -> str:
    if not isinstance(value, str):
        raise BadRequest(400, f"{where} must be a string, got {type(value).__name__}")
    if len(value) > limits.max_query_chars:
        raise BadRequest(413, f"{where} is {len(value)} characters; the limit is "
                              f"{limits.max_query_chars} (serve.max_query_chars)")  # fmt: skip
    if not value.strip():
        raise BadRequest(400, f"{where} is empty")
    return value


def parse_get(
    params: Mapping[str, str], limits: ServeSpec, granularities: Sequence[str]
) -> SearchRequest:
    """`GET /search` query parameters -> a `SearchRequest` (see the module doc)."""
    if "q" not in params:
        raise BadRequest(400, "missing query parameter q")
    q = _query(params["q"], limits)
    return SearchRequest(
        [q], _k(params.get("k"), limits), _granularity(params.get("granularity"), granularities)
    )


def parse_post(body: bytes, limits: ServeSpec, granularities: Sequence[str]) -> SearchRequest:
    """`POST /search` body -> a `SearchRequest` (see the module doc)."""
    if len(body) > limits.max_body_bytes:
        raise BadRequest(413, f"body is {len(body)} bytes; the limit is {limits.max_body_bytes}")
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(400, f"malformed JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadRequest(400, f"the body must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"queries", "query", "k", "granularity"})
    if unknown:
        raise BadRequest(
            400, f"unknown field {unknown[0]!r}; allowed: queries, query, k, granularity"
        )
    if ("queries" in data) == ("query" in data):
        raise BadRequest(400, "give exactly one of queries (a list) or query (a string)")
    queries = data["queries"] if "queries" in data else [data["query"]]
    if not isinstance(queries, list) or not queries:
        raise BadRequest(400, "queries must be a non-empty list of strings")
    if len(queries) > limits.max_request_queries:
        raise BadRequest(413, f"{len(queries)} queries; the limit is {limits.max_request_queries}"
                              " (serve.max_request_queries)")  # fmt: skip
    where = "queries[{}]" if "queries" in data else "query"
    qs = [_query(q, limits, where.format(i)) for i, q in enumerate(queries)]
    return SearchRequest(
        qs, _k(data.get("k"), limits), _granularity(data.get("granularity"), granularities)
    )

"""The service's inputs, validated: every bad one is a `BadRequest` with a one-line reason.

Contract: `parse_get(params, limits, granularities, n_passages)` reads `GET
/search?q=&k=&granularity=`, `parse_post(body, limits, granularities, n_passages)` reads `POST
/search` (`{"queries": [...] | "query": "...", "k": int, "granularity": str | [str, ...]}`);
both return a `SearchRequest` or raise `BadRequest(status, reason)`: 400 for an empty or
missing query, a `k` that is not an integer in 1..`max_k` or is above the corpus's
`n_passages` (a search returns unique passages), an unknown granularity, malformed JSON or a
body of the wrong shape; 413 for a query longer than `max_query_chars`, more than
`max_request_queries` queries or a body over `max_body_bytes`. `granularity` is one served
name, several (a JSON list, or comma-separated in a URL), or `all`; absent, the first served.
`SearchRequest.several` says whether the request named more than one (or `all`): the
response then gives the results per granularity. Nothing here touches the index.
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
    granularities: list[str]
    several: bool = False  # a list, a comma list or `all`: results per granularity


def _k(value: Any, limits: ServeSpec, n_passages: int | None = None) -> int:
    if value is None or value == "":  # the default, at most the corpus's passages
        return min(limits.default_k, n_passages or limits.default_k)
    k = _k_value(value, limits)
    if n_passages is not None and k > n_passages:
        raise BadRequest(400, f"k={k} is more than the {n_passages} passages served; ask for "
                              f"k <= {n_passages}")  # fmt: skip
    return k


def _k_value(value: Any, limits: ServeSpec) -> int:
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


def _granularities(value: Any, granularities: Sequence[str]) -> tuple[list[str], bool]:
    """(the requested granularities, whether several were asked for)."""
    if value is None or value == "":
        return [granularities[0]], False
    if value == "all":
        return list(granularities), True
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",")]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise BadRequest(400, "granularity must be a name, a list of names or 'all'")
    for name in names:
        if name not in granularities:
            raise BadRequest(400, f"unknown granularity {name[:40]!r}; served: "
                                  f"{', '.join(granularities)} (or all)")  # fmt: skip
    return list(dict.fromkeys(names)), isinstance(value, list) or len(names) > 1


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
    params: Mapping[str, str], limits: ServeSpec, granularities: Sequence[str],
    n_passages: int | None = None,
) -> SearchRequest:  # fmt: skip
    """`GET /search` query parameters -> a `SearchRequest` (see the module doc)."""
    if "q" not in params:
        raise BadRequest(400, "missing query parameter q")
    q = _query(params["q"], limits)
    k = _k(params.get("k"), limits, n_passages)
    return SearchRequest([q], k, *_granularities(params.get("granularity"), granularities))


def parse_post(
    body: bytes, limits: ServeSpec, granularities: Sequence[str], n_passages: int | None = None
) -> SearchRequest:
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
    k = _k(data.get("k"), limits, n_passages)
    return SearchRequest(qs, k, *_granularities(data.get("granularity"), granularities))

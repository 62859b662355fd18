"""The FastAPI app: JSON search, the explorer page and the sweep browser.

Contract: `create_app(indexes, spec, sweep=None)` serves an opened `IndexSet`:
- `GET /search?q=&k=&granularity=` -> `{"query", "granularity", "k", "results": [hit]}` and
  `POST /search` (`{"queries": [...], "k", "granularity"}`) -> `{"granularity", "k",
  "queries": [{"query", "results": [hit]}]}`, each hit `{"id", "title", "text", "score",
  "units": [{"id", "text", "score", "span"}]}`; `granularity` may name several (a list, a
  comma list, or `all`): `granularity` is then that list and `results` an object of hit
  lists by granularity. `k` is at most the corpus's passages (else 400). Every query goes
  through one `MicroBatcher`;
- `GET /healthz` -> status, what is served (corpus, dataset, per granularity), the batcher's
  counts; `GET /openapi.json` the OpenAPI schema and `GET /docs` a self-contained page of it
  (no script or asset from elsewhere: it works offline); the responses they state for
  `/search` are those it answers: 200, 400 and 413 (`SEARCH_ERRORS`), never FastAPI's 422;
- `GET /` the explorer: a landing page naming the corpus, retriever(s) and benchmark dataset
  with example questions (or the one-line reason answers cannot be highlighted); `?q=&k=`:
  Table 4 (each granularity's top unit, its own text beside its span in the passage), the
  first answer rank per granularity, and one column per granularity; `GET /sweep` the sweep
  browser (`?found=&missed=&k=&answer_type=&length=`), `GET /sweep/question/{id}` one
  question side by side, `GET /sweep/plot.png`.
Every client error is a 4xx JSON `{"error": reason}` (one line; HTML pages show it in place);
an unexpected failure is logged and answered 500 without a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from densex.pipelines.search.index import Hit, IndexSet
from densex.pipelines.serve.batcher import MicroBatcher
from densex.pipelines.serve.pages import markdown_table, render
from densex.pipelines.serve.requests import BadRequest, SearchRequest, parse_get, parse_post
from densex.pipelines.serve.sweep_data import SweepData
from densex.pipelines.specs import ServeSpec
from densex.utils.logging import get_logger

log = get_logger(__name__)
SHOWN_QUESTIONS = 200  # rows of the sweep browser's question list


def create_app(indexes: IndexSet, spec: ServeSpec, sweep: SweepData | None = None) -> FastAPI:
    """The app over `indexes` (see the module doc)."""
    batcher = MicroBatcher(
        lambda g, qs, k: indexes[g].search(qs, k, spec.units_per_passage),
        spec.batch_max_queries,
        spec.batch_wait_ms / 1000.0,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan protocol
        yield
        batcher.close()

    app = FastAPI(title="densex search", description=API_DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None)  # fmt: skip
    app.state.batcher, app.state.indexes, app.state.spec, app.state.sweep = (
        batcher,
        indexes,
        spec,
        sweep,
    )
    app.state.question_problem = indexes.question_problem()
    _error_handlers(app)
    _json_routes(app, indexes, spec, batcher)
    _page_routes(app, indexes, spec, batcher, sweep)
    return app


API_DESCRIPTION = (
    "Dense retrieval over passages, sentences or propositions: a passage's score is the best "
    "score of its units. Scores are raw similarities of each granularity's own index: they "
    "rank passages within a granularity and are not comparable across granularities."
)


async def _search(batcher: MicroBatcher, req: SearchRequest) -> list[dict[str, list[Hit]]]:
    """Per query, `{granularity: hits}` for each requested granularity (one batch each)."""
    found = await asyncio.gather(
        *(batcher.submit(g, req.queries, req.k) for g in req.granularities)
    )
    return [{g: hits[i] for g, hits in zip(req.granularities, found)} for i in range(len(req.queries))]  # fmt: skip


def _results(req: SearchRequest, per_granularity: dict[str, list[Hit]]) -> Any:
    """One query's JSON results: a hit list, or hit lists by granularity when several."""
    as_json = {g: [h.to_dict() for h in hits] for g, hits in per_granularity.items()}
    return as_json if req.several else as_json[req.granularities[0]]


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, e: BadRequest) -> JSONResponse:
        return JSONResponse({"error": e.reason}, status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        first = (e.errors() or [{}])[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid')}"}, status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"error": f"internal error ({type(e).__name__})"}, status_code=500)


class ErrorBody(BaseModel):
    """Every client error's body."""

    error: str


# The client errors `/search` answers (`requests.BadRequest`; FastAPI's own validation, were it
# to run, is answered 400 too: `_error_handlers`). Declared here so that the OpenAPI schema and
# `/docs` state them; no FastAPI-validated parameter is declared on these routes, so FastAPI adds
# no `422 Validation Error` the service never answers.
SEARCH_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "bad input (an empty or missing query, k not in "
          "1..serve.max_k or above the corpus's passages, an unknown granularity, malformed "
          "JSON): {error}"},
    413: {"model": ErrorBody, "description": "too large (a query over serve.max_query_chars, "
          "more than serve.max_request_queries queries, a body over serve.max_body_bytes): "
          "{error}"},
}  # fmt: skip

GET_PARAMS = {
    "q": "the query (required)",
    "k": "passages to return: 1..serve.max_k and at most the corpus's passages (default "
    "serve.default_k)",
    "granularity": "a served granularity, several comma-separated, or all (default: the "
    "first served); several give `results` as an object by granularity",
}
POST_BODY = {"required": True, "content": {"application/json": {"schema": {
    "type": "object",
    "properties": {
        "queries": {"type": "array", "items": {"type": "string"}, "description": "the queries"},
        "query": {"type": "string", "description": "one query (instead of queries)"},
        "k": {"type": "integer", "minimum": 1, "description": GET_PARAMS["k"]},
        "granularity": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                        "description": GET_PARAMS["granularity"]},
    },
    "example": {"queries": ["Who owned the last ropewalk?"], "k": 3,
                "granularity": ["passage", "proposition"]},
}}}}  # fmt: skip


def _get_parameters(spec: ServeSpec) -> list[dict[str, Any]]:
    """`GET /search`'s query parameters as OpenAPI states them (read by `parse_get`)."""
    k = {"type": "integer", "minimum": 1, "maximum": spec.max_k, "default": spec.default_k}
    schemas = {"q": {"type": "string", "maxLength": spec.max_query_chars}, "k": k,
               "granularity": {"type": "string"}}  # fmt: skip
    return [{"name": name, "in": "query", "required": name == "q", "description": text,
             "schema": schemas[name]} for name, text in GET_PARAMS.items()]  # fmt: skip


def _json_routes(app: FastAPI, indexes: IndexSet, spec: ServeSpec, batcher: MicroBatcher) -> None:
    grans, n_passages = list(indexes), indexes.n_passages

    @app.get("/healthz", summary="What is served, and the batcher's counts")
    async def healthz() -> dict[str, Any]:
        served = {g: {"retriever": i.retriever, "units": len(i), "passages": len(i.cell.passages)}
                  for g, i in indexes.items()}  # fmt: skip
        stats = dataclasses.asdict(batcher.stats)
        stats["sizes"] = {str(n): c for n, c in sorted(stats["sizes"].items())}
        return {"status": "ok", "corpus": indexes.corpus, "dataset": indexes.dataset,
                "granularities": served, "batching": stats}  # fmt: skip

    @app.get("/search", summary="Search one query", responses=SEARCH_ERRORS,
             openapi_extra={"parameters": _get_parameters(spec)},
             description="-> {query, granularity, k, results: [{id, title, text, score, units: "
                         "[{id, text, score, span}]}]}; a bad request is a 4xx {error}.")  # fmt: skip
    async def search_get(request: Request) -> dict[str, Any]:
        req = parse_get(request.query_params, spec, grans, n_passages)
        (found,) = await _search(batcher, req)
        named = req.granularities if req.several else req.granularities[0]
        return {"query": req.queries[0], "granularity": named, "k": req.k,
                "results": _results(req, found)}  # fmt: skip

    @app.post("/search", summary="Search a batch of queries", responses=SEARCH_ERRORS,
              openapi_extra={"requestBody": POST_BODY},
              description="-> {granularity, k, queries: [{query, results}]}, results as for "
                          "GET /search; a bad request is a 4xx {error}.")  # fmt: skip
    async def search_post(request: Request) -> dict[str, Any]:
        size = request.headers.get("content-length")
        if size and size.isdigit() and int(size) > spec.max_body_bytes:
            raise BadRequest(413, f"body is {size} bytes; the limit is {spec.max_body_bytes}")
        req = parse_post(await request.body(), spec, grans, n_passages)
        found = await _search(batcher, req)
        named = req.granularities if req.several else req.granularities[0]
        return {"granularity": named, "k": req.k, "queries": [
            {"query": q, "results": _results(req, f)} for q, f in zip(req.queries, found)
        ]}  # fmt: skip

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> HTMLResponse:
        example = (indexes.examples(1) or [{"question": "Who owned the last ropewalk?"}])[0]
        return HTMLResponse(render("docs.html", api=app.openapi(), example=example["question"],
                                   granularities=grans))  # fmt: skip


EXAMPLES = 5  # benchmark questions offered on the landing page


def _page_context(indexes: IndexSet, spec: ServeSpec, sweep: SweepData | None,
                  problem: str | None) -> dict[str, Any]:  # fmt: skip
    """What every explorer page shows: what is served, and questions to try."""
    grans = list(indexes)
    return {"has_sweep": sweep is not None, "granularities": grans,
            "max_k": min(spec.max_k, indexes.n_passages), "ncols": len(grans),
            "sizes": {g: len(i) for g, i in indexes.items()}, "corpus": indexes.corpus,
            "n_passages": indexes.n_passages, "dataset": indexes.dataset,
            "n_questions": len(indexes.questions),
            "retrievers": {g: i.retriever for g, i in indexes.items()},
            "examples": [q["question"] for q in indexes.examples(EXAMPLES)], "problem": problem}  # fmt: skip


def _page_routes(
    app: FastAPI, indexes: IndexSet, spec: ServeSpec, batcher: MicroBatcher,
    sweep: SweepData | None,
) -> None:  # fmt: skip
    grans = list(indexes)
    page = _page_context(indexes, spec, sweep, app.state.question_problem)

    async def explorer(query: str, k: Any, question: dict | None = None) -> HTMLResponse:
        ctx: dict[str, Any] = {**page, "query": query, "k": min(spec.default_k, page["max_k"]),
                               "results": None, "answers": None, "ranks": None,
                               "question": question, "error": None}  # fmt: skip
        if not query:
            return HTMLResponse(render("explorer.html", **ctx))
        try:
            req = parse_get({"q": query, "k": k, "granularity": "all"}, spec, grans,
                            indexes.n_passages)  # fmt: skip
        except BadRequest as e:
            return HTMLResponse(render("explorer.html", **{**ctx, "error": e.reason}), e.status)
        (found,) = await _search(batcher, req)
        answers = (question or {}).get("answers") or indexes.answers(query)
        ranks = ({g: indexes.first_answer_rank(hits, answers) for g, hits in found.items()}
                 if answers else None)  # fmt: skip
        ctx.update(k=req.k, results=found, answers=answers, ranks=ranks)
        return HTMLResponse(render("explorer.html", **ctx))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home(q: str = "", k: str = "") -> HTMLResponse:
        return await explorer(q, k)

    @app.get("/sweep/question/{qid}", response_class=HTMLResponse, include_in_schema=False)
    async def question_page(qid: str, k: str = "") -> HTMLResponse:
        row = sweep.question(qid) if sweep is not None else None
        if row is None:
            raise BadRequest(404, f"no question {qid[:80]!r} in the served sweep")
        return await explorer(str(row["question"]), k, row)

    _sweep_routes(app, page, sweep)


def _sweep_routes(app: FastAPI, page: dict[str, Any], sweep: SweepData | None) -> None:
    @app.get("/sweep", response_class=HTMLResponse, include_in_schema=False)
    async def sweep_page(found: str = "", missed: str = "", k: str = "", answer_type: str = "",
                         length: str = "") -> HTMLResponse:  # fmt: skip
        if sweep is None:
            raise BadRequest(404, "no sweep is served: start with serve.sweep_dir=SWEEP_DIR")
        kinds, lengths = sweep.buckets()
        ctx: dict[str, Any] = {**page, "root": str(sweep.root), "cells": list(sweep.cells),
            "ks": sweep.ks, "found": found, "missed": missed, "answer_kind": answer_type,
            "length": length, "kinds": kinds, "lengths": lengths, "error": None,
            "table2": markdown_table(sweep.table2_md), "plot": sweep.plot is not None,
            "winloss": sweep.winloss, "winloss_cols": list(sweep.winloss[0]) if sweep.winloss else []}  # fmt: skip
        try:
            kk = int(k) if k else None
            rows = sweep.filter(found, missed, kk, answer_type, length)
            ctx["k"] = kk or sweep.ks[0]
        except ValueError as e:
            ctx.update(error=str(e), k=sweep.ks[0] if sweep.ks else None, total=0, shown=[], ranks={})  # fmt: skip
            return HTMLResponse(render("sweep.html", **ctx), 400)
        shown = rows[:SHOWN_QUESTIONS]
        ranks = {q["id"]: sweep.question(q["id"])["ranks"] for q in shown}
        ctx.update(total=len(rows), shown=shown, ranks=ranks)
        return HTMLResponse(render("sweep.html", **ctx))

    @app.get("/sweep/plot.png", include_in_schema=False)
    async def plot() -> FileResponse:
        if sweep is None or sweep.plot is None:
            raise BadRequest(404, "the served sweep has no answer_recall_by_words.png")
        return FileResponse(sweep.plot, media_type="image/png")

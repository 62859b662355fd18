"""The FastAPI app: JSON search, the explorer page and the sweep browser.

Contract: `create_app(indexes, spec, sweep=None)` serves an opened `IndexSet`:
- `GET /search?q=&k=&granularity=` -> `{"query", "granularity", "k", "results": [hit]}` and
  `POST /search` (`{"queries": [...], "k", "granularity"}`) -> `{"granularity", "k",
  "queries": [{"query", "results": [hit]}]}`, each hit `{"id", "title", "text", "score",
  "units": [{"id", "text", "score", "span"}]}`; every query goes through one `MicroBatcher`;
- `GET /healthz` -> status, what is served, the batcher's counts;
- `GET /` the explorer (`?q=&k=`: one column per granularity), `GET /sweep` the sweep browser
  (`?found=&missed=&k=&answer_type=&length=`), `GET /sweep/question/{id}` one question side by
  side, `GET /sweep/plot.png`.
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
from starlette.exceptions import HTTPException

from densex.pipelines.search.index import IndexSet
from densex.pipelines.serve.batcher import MicroBatcher
from densex.pipelines.serve.pages import markdown_table, render
from densex.pipelines.serve.requests import BadRequest, parse_get, parse_post
from densex.pipelines.serve.sweep_data import SweepData
from densex.pipelines.specs import ServeSpec
from densex.utils.logging import get_logger

log = get_logger(__name__)
SHOWN_QUESTIONS = 200  # rows of the sweep browser's question list


def create_app(indexes: IndexSet, spec: ServeSpec, sweep: SweepData | None = None) -> FastAPI:
    """The app over `indexes` (see the module doc)."""
    grans = list(indexes)
    batcher = MicroBatcher(
        lambda g, qs, k: indexes[g].search(qs, k, spec.units_per_passage),
        spec.batch_max_queries,
        spec.batch_wait_ms / 1000.0,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan protocol
        yield
        batcher.close()

    app = FastAPI(title="densex search", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.batcher, app.state.indexes, app.state.spec, app.state.sweep = (
        batcher,
        indexes,
        spec,
        sweep,
    )
    _error_handlers(app)
    _json_routes(app, indexes, spec, batcher, grans)
    _page_routes(app, indexes, spec, batcher, sweep)
    return app


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


def _json_routes(
    app: FastAPI, indexes: IndexSet, spec: ServeSpec, batcher: MicroBatcher, grans: list[str]
) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        served = {g: {"retriever": i.retriever, "units": len(i), "passages": len(i.cell.passages)}
                  for g, i in indexes.items()}  # fmt: skip
        stats = dataclasses.asdict(batcher.stats)
        stats["sizes"] = {str(n): c for n, c in sorted(stats["sizes"].items())}
        return {"status": "ok", "granularities": served, "batching": stats}

    @app.get("/search")
    async def search_get(request: Request) -> dict[str, Any]:
        req = parse_get(request.query_params, spec, grans)
        (hits,) = await batcher.submit(req.granularity, req.queries, req.k)
        return {"query": req.queries[0], "granularity": req.granularity, "k": req.k,
                "results": [h.to_dict() for h in hits]}  # fmt: skip

    @app.post("/search")
    async def search_post(request: Request) -> dict[str, Any]:
        size = request.headers.get("content-length")
        if size and size.isdigit() and int(size) > spec.max_body_bytes:
            raise BadRequest(413, f"body is {size} bytes; the limit is {spec.max_body_bytes}")
        req = parse_post(await request.body(), spec, grans)
        results = await batcher.submit(req.granularity, req.queries, req.k)
        return {"granularity": req.granularity, "k": req.k, "queries": [
            {"query": q, "results": [h.to_dict() for h in hits]} for q, hits in zip(req.queries, results)
        ]}  # fmt: skip


def _page_routes(
    app: FastAPI, indexes: IndexSet, spec: ServeSpec, batcher: MicroBatcher,
    sweep: SweepData | None,
) -> None:  # fmt: skip
    grans = list(indexes)
    page = {"has_sweep": sweep is not None, "granularities": grans, "max_k": spec.max_k,
            "ncols": len(grans), "sizes": {g: len(i) for g, i in indexes.items()}}  # fmt: skip

    async def explorer(query: str, k: Any, question: dict | None = None) -> HTMLResponse:
        ctx: dict[str, Any] = {**page, "query": query, "k": spec.default_k, "results": None,
                               "answers": None, "question": question, "error": None}  # fmt: skip
        if not query:
            return HTMLResponse(render("explorer.html", **ctx))
        try:
            req = parse_get({"q": query, "k": k}, spec, grans)
        except BadRequest as e:
            return HTMLResponse(render("explorer.html", **{**ctx, "error": e.reason}), e.status)
        found = await asyncio.gather(*(batcher.submit(g, req.queries, req.k) for g in grans))
        answers = (question or {}).get("answers") or indexes.answers(query)
        ctx.update(k=req.k, results={g: r[0] for g, r in zip(grans, found)}, answers=answers)
        return HTMLResponse(render("explorer.html", **ctx))

    @app.get("/", response_class=HTMLResponse)
    async def home(q: str = "", k: str = "") -> HTMLResponse:
        return await explorer(q, k)

    @app.get("/sweep/question/{qid}", response_class=HTMLResponse)
    async def question_page(qid: str, k: str = "") -> HTMLResponse:
        row = sweep.question(qid) if sweep is not None else None
        if row is None:
            raise BadRequest(404, f"no question {qid[:80]!r} in the served sweep")
        return await explorer(str(row["question"]), k, row)

    _sweep_routes(app, page, sweep)


def _sweep_routes(app: FastAPI, page: dict[str, Any], sweep: SweepData | None) -> None:
    @app.get("/sweep", response_class=HTMLResponse)
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

    @app.get("/sweep/plot.png")
    async def plot() -> FileResponse:
        if sweep is None or sweep.plot is None:
            raise BadRequest(404, "the served sweep has no answer_recall_by_words.png")
        return FileResponse(sweep.plot, media_type="image/png")

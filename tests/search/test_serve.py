"""The search service in-process (FastAPI app over the real demo index): every bad input is a
4xx with a one-line reason and the next good request is answered; concurrent requests are
micro-batched into shared encoder calls and get the answers they would get alone."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from fastapi.testclient import TestClient

from densex.pipelines.serve.app import create_app
from densex.pipelines.specs import ServeSpec

GOOD = {"q": "In what year did Kessingbury receive its royal charter?", "k": "3"}

BAD_GET = [  # (params, status, words of the reason)
    ({"q": ""}, 400, "q is empty"),
    ({"q": "   "}, 400, "q is empty"),
    ({}, 400, "missing query parameter q"),
    ({"q": "x" * 5000}, 413, "5000 characters; the limit is 2000"),
    ({"q": "a", "k": "0"}, 400, "k must be in 1..100, got 0"),
    ({"q": "a", "k": "-3"}, 400, "k must be in 1..100, got -3"),
    ({"q": "a", "k": "101"}, 400, "k must be in 1..100, got 101"),
    ({"q": "a", "k": "ten"}, 400, "k must be an integer"),
    ({"q": "a", "granularity": "word"}, 400, "unknown granularity 'word'"),
]
BAD_POST = [  # (body, status, words of the reason)
    (b'{"queries": ["a"', 400, "malformed JSON"),
    (b"not json", 400, "malformed JSON"),
    (b"\xff\xfe", 400, "malformed JSON"),
    (b'["a"]', 400, "must be a JSON object"),
    (b'{"queries": []}', 400, "non-empty list"),
    (b'{"queries": "a"}', 400, "non-empty list"),
    (b'{"queries": ["ok", 3]}', 400, "queries[1] must be a string"),
    (b'{"queries": ["ok", ""]}', 400, "queries[1] is empty"),
    (json.dumps({"query": "y" * 100_000}).encode(), 413, "100000 characters"),
    (json.dumps({"queries": ["a"] * 300}).encode(), 413, "300 queries; the limit is 256"),
    (b'{"query": "a", "k": 0}', 400, "k must be in 1..100"),
    (b'{"query": "a", "k": 1000}', 400, "k must be in 1..100"),
    (b'{"query": "a", "k": 2.5}', 400, "k must be an integer"),
    (b'{"query": "a", "granularity": "chapter"}', 400, "unknown granularity 'chapter'"),
    (b'{"query": "a", "queries": ["b"]}', 400, "exactly one of queries"),
    (b'{"query": "a", "topk": 5}', 400, "unknown field 'topk'"),
    (b"x" * 1_100_000, 413, "the limit is 1000000"),
]


@pytest.fixture(scope="module")
def client(demo_index):
    with TestClient(create_app(demo_index, ServeSpec())) as c:
        yield c


def _good(client: TestClient) -> None:
    r = client.get("/search", params={**GOOD, "granularity": "proposition"})
    assert r.status_code == 200
    top = r.json()["results"][0]
    assert top["id"].startswith("Kessingbury#") and "1312" in top["units"][0]["text"]


@pytest.mark.parametrize(("params", "status", "reason"), BAD_GET)
def test_bad_get_is_a_4xx_with_its_reason(client, params, status, reason):
    r = client.get("/search", params=params)
    assert r.status_code == status and reason in r.json()["error"]
    assert "\n" not in r.json()["error"]
    _good(client)


@pytest.mark.parametrize(("body", "status", "reason"), BAD_POST)
def test_bad_post_is_a_4xx_with_its_reason(client, body, status, reason):
    r = client.post("/search", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status and reason in r.json()["error"], r.text[:300]
    assert "\n" not in r.json()["error"]
    _good(client)


def test_unknown_route_and_method_are_4xx_json(client):
    assert client.get("/nope").json() == {"error": "Not Found"}
    assert client.delete("/search").status_code == 405
    assert client.get("/sweep").status_code == 404  # no sweep served here
    _good(client)


def test_get_and_post_agree_with_the_api(client, demo_index):
    q = GOOD["q"]
    r = client.post("/search", json={"queries": [q, "ropewalks of the 1790s"], "k": 2,
                                      "granularity": "sentence"})  # fmt: skip
    assert r.status_code == 200
    body = r.json()
    want = demo_index.search([q, "ropewalks of the 1790s"], 2, "sentence")
    for got, hits in zip(body["queries"], want):
        assert [h["id"] for h in got["results"]] == [h.id for h in hits]
        assert [h["score"] for h in got["results"]] == pytest.approx(
            [h.score for h in hits], abs=1e-5
        )
        assert set(got["results"][0]) == {"id", "title", "text", "score", "units"}
        assert set(got["results"][0]["units"][0]) == {"id", "text", "score", "span"}
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    assert health["granularities"]["proposition"] == {
        "retriever": "minilm",
        "units": 472,
        "passages": 51,
    }


def test_concurrent_requests_share_encoder_calls(demo_index):
    questions = [q["question"] for q in list(demo_index.questions.values())[:32]]
    app = create_app(demo_index, ServeSpec(batch_wait_ms=20))

    async def ask_all():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            rs = await asyncio.gather(
                *(c.get("/search", params={"q": q, "k": 5}) for q in questions)
            )
            return rs, (await c.get("/healthz")).json()["batching"]

    responses, stats = asyncio.run(ask_all())
    assert all(r.status_code == 200 for r in responses)
    assert stats["requests"] == stats["queries"] == len(questions)
    assert stats["batches"] < len(questions) // 2 and stats["largest_batch"] > 1
    alone = demo_index.search(questions, 5, "passage")
    for r, hits in zip(responses, alone):
        assert [h["id"] for h in r.json()["results"]] == [h.id for h in hits]


def test_serve_entry_reports_bad_input_in_one_line(repo_root, tmp_path):
    import subprocess
    import sys

    from helpers.env import subprocess_env

    cmd = [sys.executable, str(repo_root / "serve.py"), "corpus=demo",
           f"corpus.passages={tmp_path / 'missing.jsonl'}", "granularity=passage,proposition",
           f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=repo_root, env=subprocess_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error (")]
    assert "missing.jsonl" in line

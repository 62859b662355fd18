"""The search service in-process (FastAPI app over the real demo index): every bad input is a
4xx with a one-line reason and the next good request is answered; concurrent requests are
micro-batched into shared encoder calls and get the answers they would get alone."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

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
    ({"q": "a", "granularity": "passage,word"}, 400, "unknown granularity 'word'"),
    ({"q": "a", "k": "52"}, 400, "k=52 is more than the 51 passages served"),
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
    (b'{"query": "a", "granularity": ["passage", 3]}', 400, "granularity must be a name"),
    (b'{"query": "a", "granularity": []}', 400, "granularity must be a name"),
    (b'{"query": "a", "k": 60}', 400, "k=60 is more than the 51 passages served"),
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
    assert (health["corpus"], health["dataset"]) == ("demo", "demo")
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


def _serve_exit(repo_root, tmp_path, *overrides: str):
    """`serve.py` run as a user would, expected to stop with status 2 on bad input: the
    process and its one `error (...)` line."""
    import subprocess
    import sys

    from helpers.env import subprocess_env

    cmd = [sys.executable, str(repo_root / "serve.py"), *overrides,
           f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=repo_root, env=subprocess_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error (")]
    return proc, line


def test_serve_entry_reports_bad_input_in_one_line(tmp_path, capfd):
    """`serve.py` run in this process (its argv rewrite, Hydra, the preflight): status 2 and
    one `error (...)` line; the fresh process of the entry script is the next test's."""
    from helpers.inproc import run_script

    status = run_script("serve.py", "corpus=demo", f"corpus.passages={tmp_path / 'missing.jsonl'}",
                        "granularity=passage,proposition", f"paths.cache_dir={tmp_path / 'cache'}",
                        f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    err = capfd.readouterr().err
    assert status == 2, err[-2000:]
    (line,) = [x for x in err.splitlines() if x.startswith("error (")]
    assert "missing.jsonl" in line


def test_serve_entry_logs_one_preflight_line(repo_root, tmp_path):
    """Each granularity is preflighted, and `preflight ok` is one line for all of them (it was
    printed once per granularity). `serve.sweep_dir=latest` with no sweep ends the entry
    right after the preflight, before any index is opened."""
    proc, line = _serve_exit(repo_root, tmp_path, "experiment=demo", "serve.sweep_dir=latest",
                             f"paths.log_dir={tmp_path / 'logs'}")  # fmt: skip
    assert "no finished multirun" in line
    printed = [x for x in (proc.stdout + proc.stderr).splitlines() if "preflight ok" in x]
    assert len(printed) == 1, printed
    assert "preflight ok: models retriever" in printed[0]
    logged = (tmp_path / "run" / "serve.log").read_text().splitlines()
    assert len([x for x in logged if "preflight ok" in x]) == 1


def test_one_request_asks_for_several_granularities(client, demo_index):
    q = GOOD["q"]
    r = client.get("/search", params={"q": q, "k": 2, "granularity": "proposition,passage"})
    body = r.json()
    assert r.status_code == 200 and body["granularity"] == ["proposition", "passage"]
    assert list(body["results"]) == ["proposition", "passage"]
    for g, hits in body["results"].items():
        assert [h["id"] for h in hits] == [h.id for h in demo_index.search([q], 2, g)[0]]
    every = client.get("/search", params={"q": q, "k": 1, "granularity": "all"}).json()
    assert list(every["results"]) == ["passage", "sentence", "proposition"]
    r = client.post("/search", json={"queries": [q, "Who owned the last ropewalk?"], "k": 1,
                                      "granularity": ["sentence", "proposition"]})  # fmt: skip
    body = r.json()
    assert r.status_code == 200 and body["granularity"] == ["sentence", "proposition"]
    assert [list(x["results"]) for x in body["queries"]] == [["sentence", "proposition"]] * 2
    one = client.post("/search", json={"query": q, "k": 1, "granularity": "sentence"}).json()
    assert isinstance(one["queries"][0]["results"], list)  # one name: a plain hit list


def test_docs_page_is_served_offline_from_the_openapi_schema(client):
    schema = client.get("/openapi.json").json()
    get = schema["paths"]["/search"]["get"]
    assert [p["name"] for p in get["parameters"]] == ["q", "k", "granularity"]
    assert [p["required"] for p in get["parameters"]] == [True, False, False]
    assert "requestBody" in schema["paths"]["/search"]["post"]
    assert set(schema["paths"]) == {"/healthz", "/search"}  # the JSON API only
    r = client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    for text in ("GET /search", "POST /search", "GET /healthz", 'href="/openapi.json"',
                 "<code>granularity</code>", "not comparable", "curl"):  # fmt: skip
        assert text in html, text
    assert "<script src" not in html and 'src="http' not in html  # nothing fetched elsewhere
    assert '<link rel="stylesheet"' not in html


def test_documented_error_codes_are_the_ones_answered(client):
    """`/openapi.json` and `/docs` state the codes a bad request gets: 400 and 413 (the app
    answers FastAPI's validation errors 400), never FastAPI's default 422."""
    schema = client.get("/openapi.json").json()
    documented = {m: set(op["responses"]) for m, op in schema["paths"]["/search"].items()}
    assert documented == {"get": {"200", "400", "413"}, "post": {"200", "400", "413"}}
    assert not [(p, m) for p, ops in schema["paths"].items() for m, op in ops.items()
                if "422" in op["responses"]]  # fmt: skip
    error = schema["paths"]["/search"]["get"]["responses"]["400"]["content"]["application/json"]
    assert error["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
    answered = {
        "get": [client.get("/search", params=p).status_code
                for p in ({"q": "a", "k": "0"}, {}, {"q": "x" * 5000})],
        "post": [client.post("/search", content=b, headers={"content-type": "application/json"}).status_code
                 for b in (b'{"query": "a", "k": 0}', b"not json", json.dumps({"queries": ["a"] * 300}).encode())],
    }  # fmt: skip
    assert answered == {"get": [400, 400, 413], "post": [400, 400, 413]}
    for method, codes in answered.items():
        assert {str(c) for c in codes} <= documented[method]
    html = client.get("/docs").text
    section = html.split('id="get--search"')[1].split("</section>")[0]
    assert "<code>400</code> bad input" in section and "<code>413</code> too large" in section
    assert "<code>422</code>" not in html
    _good(client)


def test_landing_page_names_what_is_served_and_offers_questions(client, demo_index):
    html = client.get("/").text
    served = html.split('id="served"')[1].split("</p>")[0]
    for text in (
        "<b>demo</b> (51 passages)",
        "<b>minilm</b>",
        "472 proposition units",
        "benchmark questions <b>demo</b> (60)",
    ):  # fmt: skip  (limit_questions=60)
        assert text in served, text
    examples = [e["question"] for e in demo_index.examples(5)]
    assert html.count('class="example"') == 5
    for q in examples:
        assert str(escape(q)) in html
    assert 'href="/docs"' in html and 'id="problem"' not in html


def test_results_view_is_table_4_with_ranks_and_a_score_note(client):
    html = client.get("/", params={"q": GOOD["q"], "k": 5}).text
    rows = {g: html.split(f'<tr data-granularity="{g}">')[1].split("</tr>")[0]
            for g in ("passage", "sentence", "proposition")}  # fmt: skip
    prop = rows["proposition"]
    own = prop.split('class="unit-text">')[1].split("</td>")[0]
    assert "1312" in own and "Kessingbury" in own  # the proposition's own text
    in_place = prop.split('class="in-place">')[1].split("</td>")[0]
    assert in_place.count('<mark class="unit">') == 1 and '<span class="context">' in in_place
    assert 'data-rank="1"' in prop.split('class="rank"')[1]
    assert "<mark" not in rows["passage"]  # the unit is the passage: nothing painted
    assert 'colspan="2"' in rows["passage"]
    assert "not comparable" in html.split('id="score-note"')[1].split("</p>")[0]
    column = html.split('<section class="column" data-granularity="passage">')[1].split(
        "</section>"
    )[0]
    assert "<mark" not in column  # no passage painted yellow in the passage column either
    sentence_col = html.split('data-granularity="sentence">')[-1].split("</section>")[0]
    marks = [a.count('<mark class="unit">') for a in sentence_col.split("<article")[1:]]
    assert len(marks) == 5 and max(marks) == 1  # at most the one matched unit per passage
    free = client.get("/", params={"q": "ropewalks beside the river", "k": 3}).text
    assert "First answer ranks are shown for benchmark questions" in free


def test_landing_page_shows_why_answers_cannot_be_highlighted(demo_index, monkeypatch):
    problem = "dataset=squad-open does not match corpus=demo: none of 20 of its questions ..."
    monkeypatch.setattr(type(demo_index), "question_problem", lambda self: problem)
    with TestClient(create_app(demo_index, ServeSpec())) as c:
        html = c.get("/").text
    assert f'<p class="warning" id="problem">{problem}</p>' in html


def test_sweep_dir_latest_is_the_newest_finished_multirun(tmp_path):
    from omegaconf import OmegaConf

    from densex.pipelines.preflight.hub import PreflightError
    from densex.pipelines.serve.run import resolve_sweep_dir

    cfg = OmegaConf.create({"paths": {"log_dir": str(tmp_path)}, "task_name": "demo"})
    runs = tmp_path / "demo" / "multiruns"
    with pytest.raises(PreflightError, match="no finished multirun in .*make demo"):
        resolve_sweep_dir("latest", cfg)
    for name, done in (("2026-12-01_10-00-00", True), ("2026-12-02_09-00-00", True),
                       ("2026-12-03_08-00-00", False)):  # fmt: skip
        (runs / name).mkdir(parents=True)
        if done:
            (runs / name / "multirun.yaml").write_text("{}")
            (runs / name / "table2.md").write_text("|a|\n")
    assert resolve_sweep_dir("latest", cfg) == str(runs / "2026-12-02_09-00-00")
    assert resolve_sweep_dir("/some/sweep", cfg) == "/some/sweep"
    assert resolve_sweep_dir(None, cfg) is None

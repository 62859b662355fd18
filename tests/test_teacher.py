"""The LLM teacher end to end: the real `openai` client against an OpenAI-compatible server on
127.0.0.1 (http.server in a thread): exact Figure 8 prompts, retry on 429, a malformed reply
falling back, the disk cache, token/cost accounting, and a key that is never written down."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.requires import require_module  # noqa: E402

require_module("openai", "openai>=1.40")

from densex.propositionizer.output import manifest_path  # noqa: E402
from densex.propositionizer.resolve import SentenceSplitter  # noqa: E402
from densex.propositionizer.teacher import TeacherError, fill_prompt  # noqa: E402
from helpers.typed import generate_propositions  # noqa: E402

SECRET = "sk-densex-test-9f8e7d6c5b4a-DO-NOT-LEAK"
KEY_ENV = "DENSEX_TEST_TEACHER_KEY"


class FakeChatServer:
    """/v1/chat/completions answering from a prompt -> content table.

    `fail_next` holds HTTP statuses to return for the next requests (429 -> Retry-After: 0).
    `bad_next` holds overrides for the next 200 replies: `{"choices": []}`, `{"content": ""}`,
    `{"finish_reason": "content_filter"}` (what a flaky or filtering server sends).
    An unknown prompt is a 400, so a prompt that is not exactly the expected one fails loudly.
    """

    def __init__(self, replies: dict[str, str]):
        self.replies = replies
        self.fail_next: list[int] = []
        self.bad_next: list[dict] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, body: dict, headers: dict | None = None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(
                        {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                    )
                    status = server.fail_next.pop(0) if server.fail_next else 200
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found"}})
                if status != 200:
                    return self._send(
                        status, {"error": {"message": f"status {status}"}}, {"Retry-After": "0"}
                    )
                prompt = body["messages"][0]["content"]
                if prompt not in server.replies:
                    return self._send(400, {"error": {"message": "unexpected prompt"}})
                content = server.replies[prompt]
                with server.lock:
                    bad = server.bad_next.pop(0) if server.bad_next else {}
                content = bad.get("content", content)
                choices = [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": bad.get("finish_reason", "stop"),
                    }
                ]
                usage = {
                    "prompt_tokens": len(prompt.split()),
                    "completion_tokens": len((content or "").split()),
                }
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                self._send(
                    200,
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": bad.get("choices", choices),
                        "usage": usage,
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # serve_forever polls for shutdown() every poll_interval: at its default 0.5 s each close
        # waited up to half a second (~8 s of one worker's wall time over this file)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def data(squad_open, tmp_path, repo_root):
    """Six real passages, the teacher propositions for them, and the expected prompts."""
    with open(squad_open / "passages.jsonl", encoding="utf-8") as f:
        passages = [json.loads(line) for line in islice(f, 6)]
    with open(squad_open / "propositions.jsonl", encoding="utf-8") as f:
        teacher = [json.loads(line)["propositions"] for line in islice(f, 6)]
    path = tmp_path / "passages.jsonl"
    path.write_text(
        "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in passages), encoding="utf-8"
    )
    # the expected prompt, built independently: the file verbatim (minus its final newline)
    # with the three slots replaced
    template = (repo_root / "conf" / "prompts" / "figure8.txt").read_text(encoding="utf-8")
    assert template.endswith("Output:\n")
    prompts = [
        template[:-1].replace(
            "Input: Title: {title}. Section: {section}. Content: {text}",
            f"Input: Title: {p['title']}. Section: {p['section']}. Content: {p['text']}",
        )
        for p in passages
    ]
    return path, passages, teacher, prompts


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _cfg(server: FakeChatServer, cache_dir: Path, repo_root: Path, **kw) -> dict:
    return {
        "type": "teacher",
        "model": "test-teacher-1",
        "base_url": server.base_url,
        "api_key_env": KEY_ENV,
        "prompt": str(repo_root / "conf" / "prompts" / "figure8.txt"),
        "max_concurrency": 3,
        "max_retries": 3,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
        "timeout": 10,
        "temperature": 0.0,
        "max_tokens": 700,
        "cache_dir": str(cache_dir),
        "prices": {"prompt_per_1m": 2.5, "completion_per_1m": 10.0},
        "fallback": "sentences",
        "spacy_model": "",
        "seed": 0,
        **kw,
    }


def _all_text(*dirs: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for d in dirs
        for p in d.rglob("*")
        if p.is_file()
    )


@pytest.fixture
def first_run(data, env, tmp_path, repo_root, caplog):
    """One teacher run over 6 passages: a malformed reply (fallback), a fenced one (repaired),
    the very first request rate-limited. Yields what the tests below check; the fake server
    stays up for reruns."""
    caplog.set_level(logging.DEBUG)  # the secret must stay out of every log line, debug too
    path, passages, teacher, prompts = data
    replies = {p: json.dumps(t, ensure_ascii=False) for p, t in zip(prompts, teacher)}
    replies[prompts[2]] = "I'm sorry, but I can't split this passage."  # malformed -> fallback
    replies[prompts[4]] = "```json\n" + json.dumps(teacher[4]) + "\n```"  # repaired
    server = FakeChatServer(replies)
    server.fail_next = [429]  # the very first request is rate-limited
    try:
        cfg = _cfg(server, tmp_path / "cache", repo_root)
        out = generate_propositions(path, cfg, tmp_path / "out" / "propositions.jsonl")
        yield SimpleNamespace(
            server=server, cfg=cfg, out=out, replies=replies, first=list(server.requests)
        )
    finally:
        server.close()


def test_teacher_requests_carry_the_prompt_settings_and_key(data, first_run):
    _, passages, _, prompts = data
    first, cfg = first_run.first, first_run.cfg
    # every request: the exact Figure 8 prompt as one user message, our settings, our key
    assert len(first) == 7  # 6 passages + 1 retry after the 429
    sent = [r["body"]["messages"] for r in first]
    assert all(len(m) == 1 and m[0]["role"] == "user" for m in sent)
    assert sorted(m[0]["content"] for m in sent[1:]) == sorted(prompts)
    assert all(r["path"] == "/v1/chat/completions" for r in first)
    assert all(r["auth"] == f"Bearer {SECRET}" for r in first)
    body = first[-1]["body"]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("test-teacher-1", 0.0, 700)
    assert fill_prompt(Path(cfg["prompt"]).read_text()[:-1], passages[0]) == prompts[0]


def test_teacher_output_and_manifest(data, first_run):
    _, passages, teacher, prompts = data
    out, replies, server = first_run.out, first_run.replies, first_run.server
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [p["id"] for p in passages]
    assert [r["propositions"] for i, r in enumerate(rows) if i != 2] == [
        t for i, t in enumerate(teacher) if i != 2
    ]
    assert rows[2]["propositions"] == SentenceSplitter("")(passages[2]["text"])

    m = json.loads(manifest_path(out).read_text())
    assert m["type"] == "teacher" and m["model"] == "test-teacher-1"
    assert (m["passages"], m["parsed_strict"], m["repaired"], m["unparseable"]) == (6, 4, 1, 1)
    assert m["fallbacks"] == {"sentences": 1} and m["repairs"] == {"fence": 1}
    assert m["requests"] == {
        "requests": 7,
        "retries": 1,
        "api_replies": 6,
        "cache_hits": 0,
        "bad_replies": 0,
        "bad_final": 0,
    }
    assert m["bad_replies"] == {"final": 0, "reasons": {}}
    assert m["skipped"] == {"total": 0, "by_field": {}, "examples": []}
    assert m["cache_namespace"] == server.base_url
    p_tok = sum(len(p.split()) for p in prompts)
    c_tok = sum(len(replies[p].split()) for p in prompts)
    assert m["tokens"] == {"prompt": p_tok, "completion": c_tok}
    assert m["cost_usd"] == pytest.approx((2.5 * p_tok + 10.0 * c_tok) / 1e6, abs=1e-6)
    assert m["api_key_env"] == KEY_ENV


def test_teacher_rerun_is_cached_and_the_key_leaks_nowhere(
    data, first_run, tmp_path, caplog, capsys
):
    path = data[0]
    out, cfg, server = first_run.out, first_run.cfg, first_run.server
    m = json.loads(manifest_path(out).read_text())
    # second run: every reply from the cache, zero requests, the same file, zero cost
    before = out.read_bytes()
    out.unlink()
    generate_propositions(path, cfg, out)
    assert len(server.requests) == 7
    assert out.read_bytes() == before
    m2 = json.loads(manifest_path(out).read_text())
    assert m2["requests"] == {
        "requests": 0,
        "retries": 0,
        "api_replies": 0,
        "cache_hits": 6,
        "bad_replies": 0,
        "bad_final": 0,
    }
    assert m2["cost_usd"] == 0 and m2["tokens"] == {"prompt": 0, "completion": 0}
    assert m2["tokens_including_cache"] == m["tokens"]

    # another model is another cache key: it asks again
    generate_propositions(path, {**cfg, "model": "test-teacher-2"}, tmp_path / "o2" / "p.jsonl")
    assert len(server.requests) == 13

    # the key went over the wire but is in no cache file, output, manifest or log
    text = _all_text(tmp_path / "cache", tmp_path / "out", tmp_path / "o2")
    assert "test-teacher-1" in text and SECRET not in text
    assert SECRET not in caplog.text
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 12


def test_teacher_gives_up_after_max_retries_and_keeps_finished_work(data, env, tmp_path, repo_root):
    path, passages, teacher, prompts = data
    server = FakeChatServer({p: json.dumps(t) for p, t in zip(prompts, teacher)})
    try:
        cfg = _cfg(server, tmp_path / "cache", repo_root, max_concurrency=1, max_retries=2)
        server.fail_next = [200, 503, 502, 500]  # passage 0 ok, passage 1 fails 3 times
        with pytest.raises(TeacherError, match=r"HTTP 500.*after 3 attempts"):
            generate_propositions(path, cfg, tmp_path / "out" / "p.jsonl")
        assert not (tmp_path / "out" / "p.jsonl").exists()
        # passage 0 is kept; the rest are cancelled (the one worker may have started one more)
        kept = len(list((tmp_path / "cache").rglob("*.json")))
        assert 1 <= kept <= 2
        n = len(server.requests)
        out = generate_propositions(path, cfg, tmp_path / "out" / "p.jsonl")  # resumes from cache
        assert len(server.requests) == n + 6 - kept
        assert json.loads(manifest_path(out).read_text())["requests"]["cache_hits"] == kept

        server.fail_next = [401]  # a client error is not retried
        with pytest.raises(TeacherError, match="HTTP 401.*not retried"):
            generate_propositions(path, {**cfg, "model": "other"}, tmp_path / "o3" / "p.jsonl")
        new = server.requests[n + 6 - kept :]
        prompts_sent = [r["body"]["messages"][0]["content"] for r in new]
        assert 1 <= len(new) <= 2 and len(set(prompts_sent)) == len(new)  # no retry of the 401
    finally:
        server.close()


def test_missing_key_and_bad_prompt_fail_clearly(data, env, tmp_path, repo_root, monkeypatch):
    path, *_ = data
    monkeypatch.delenv(KEY_ENV)
    server = FakeChatServer({})
    try:
        with pytest.raises(TeacherError, match=KEY_ENV):
            generate_propositions(
                path, _cfg(server, tmp_path / "c", repo_root), tmp_path / "o" / "p.jsonl"
            )
        bad = tmp_path / "prompt.txt"
        bad.write_text("Decompose: {text}\n")
        with pytest.raises(ValueError, match=r"lacks slots \['section', 'title'\]"):
            generate_propositions(
                path,
                _cfg(server, tmp_path / "c", repo_root, prompt=str(bad)),
                tmp_path / "o" / "p.jsonl",
            )
        assert server.requests == []
    finally:
        server.close()


def test_fill_prompt_leaves_other_braces_alone():
    template = 'Output: ["x"] {"a": 1}\nInput: Title: {title}. Section: {section}. Content: {text}'
    p = {"title": "{text}", "section": "", "text": "Braces {title} stay {}."}
    assert fill_prompt(template, p) == (
        'Output: ["x"] {"a": 1}\nInput: Title: {text}. Section: . Content: Braces {title} stay {}.'
    )


def test_changed_max_tokens_or_temperature_misses_the_cache(data, env, tmp_path, repo_root):
    """Raising max_tokens to fix truncated replies must ask again, not reuse the cut replies."""
    path, passages, teacher, prompts = data
    server = FakeChatServer({p: json.dumps(t) for p, t in zip(prompts, teacher)})
    try:
        cfg = _cfg(server, tmp_path / "cache", repo_root, max_tokens=700)
        generate_propositions(path, cfg, tmp_path / "a" / "p.jsonl")
        assert len(server.requests) == 6
        generate_propositions(path, cfg, tmp_path / "b" / "p.jsonl")  # same settings: cached
        assert len(server.requests) == 6
        out = generate_propositions(path, {**cfg, "max_tokens": 2048}, tmp_path / "c" / "p.jsonl")
        assert len(server.requests) == 12
        assert {r["body"]["max_tokens"] for r in server.requests[6:]} == {2048}
        assert json.loads(manifest_path(out).read_text())["requests"]["cache_hits"] == 0
        generate_propositions(path, {**cfg, "temperature": 0.7}, tmp_path / "d" / "p.jsonl")
        assert len(server.requests) == 18
        # the seed only seeds back-off jitter (never sent): same key
        generate_propositions(path, {**cfg, "seed": 5}, tmp_path / "e" / "p.jsonl")
        assert len(server.requests) == 18
    finally:
        server.close()
    entry = json.loads(next((tmp_path / "cache").rglob("*.json")).read_text())
    assert set(entry["generation"]) == {"temperature", "max_tokens"}


@pytest.mark.parametrize(
    "bad,reason",
    [
        ({"content": ""}, "empty content"),
        ({"content": None}, "empty content"),
        ({"choices": []}, "no choices"),
        ({"finish_reason": "content_filter"}, "finish_reason='content_filter'"),
    ],
    ids=["empty", "null-content", "no-choices", "content-filter"],
)
def test_bad_replies_are_retried_and_never_cached(bad, reason, data, env, tmp_path, repo_root):
    """A transient bad reply must not become a permanent fallback: it is retried within the
    retry policy; if every attempt is bad the passage falls back uncached (counted), and the
    next run asks again and caches the good reply."""
    path, passages, teacher, prompts = data
    server = FakeChatServer({p: json.dumps(t) for p, t in zip(prompts, teacher)})
    cache = tmp_path / "cache"
    try:
        cfg = _cfg(server, cache, repo_root, max_concurrency=1, max_retries=2)
        # passage 0: bad once, then good (one retry); passage 1: bad on all 3 attempts
        server.bad_next = [bad, {}, bad, bad, bad]
        out = generate_propositions(path, cfg, tmp_path / "a" / "p.jsonl")
        assert len(server.requests) == 6 + 1 + 2
        rows = _read_rows(out)
        assert rows[0]["propositions"] == teacher[0]  # the retry got the good reply
        assert rows[1]["propositions"] == SentenceSplitter("")(passages[1]["text"])
        assert [r["propositions"] for r in rows[2:]] == teacher[2:]
        m = json.loads(manifest_path(out).read_text())
        assert m["requests"]["bad_replies"] == 4 and m["requests"]["bad_final"] == 1
        assert m["requests"]["retries"] == 3
        assert m["bad_replies"] == {"final": 1, "reasons": {reason: 1}}
        assert m["fallbacks"] == {"sentences": 1}
        entries = [json.loads(p.read_text()) for p in cache.rglob("*.json")]
        assert len(entries) == 5 and all(e["content"].strip() for e in entries)
        assert {e["finish_reason"] for e in entries} == {"stop"}

        # the rerun asks again for passage 1 only, and now caches its good reply
        out = generate_propositions(path, cfg, tmp_path / "b" / "p.jsonl")
        assert len(server.requests) == 10
        assert server.requests[-1]["body"]["messages"][0]["content"] == prompts[1]
        assert _read_rows(out)[1]["propositions"] == teacher[1]
        assert len(list(cache.rglob("*.json"))) == 6
    finally:
        server.close()


def test_length_replies_are_cached(data, env, tmp_path, repo_root):
    """`length` is a complete reply for its max_tokens (part of the key): cached, counted."""
    path, passages, teacher, prompts = data
    server = FakeChatServer({p: json.dumps(t) for p, t in zip(prompts, teacher)})
    try:
        cfg = _cfg(server, tmp_path / "cache", repo_root, max_concurrency=1)
        server.bad_next = [{"finish_reason": "length"}]
        out = generate_propositions(path, cfg, tmp_path / "a" / "p.jsonl")
        m = json.loads(manifest_path(out).read_text())
        assert len(server.requests) == 6 and m["hit_max_tokens"] == 1
        assert m["requests"]["bad_replies"] == 0
        generate_propositions(path, cfg, tmp_path / "b" / "p.jsonl")
        assert len(server.requests) == 6
    finally:
        server.close()


def test_cache_is_keyed_by_endpoint(data, env, tmp_path, repo_root):
    """Two servers answering to the same model name (TGI's `model="tgi"`) never share cache
    entries; credentials, query and a trailing slash are not part of the endpoint (and are
    never written); `cache_namespace` replaces the endpoint when set."""
    path, passages, teacher, prompts = data
    one = FakeChatServer({p: json.dumps(t) for p, t in zip(prompts, teacher)})
    other = {p: json.dumps(t[:1]) for p, t in zip(prompts, teacher)}  # a different server
    two = FakeChatServer(other)
    cache = tmp_path / "cache"
    try:
        cfg = _cfg(one, cache, repo_root, model="tgi")
        a = generate_propositions(path, cfg, tmp_path / "a" / "p.jsonl")
        assert len(one.requests) == 6
        b = generate_propositions(
            path, {**cfg, "base_url": two.base_url}, tmp_path / "b" / "p.jsonl"
        )
        assert len(two.requests) == 6  # not answered from server one's cache
        assert [r["propositions"] for r in _read_rows(b)] == [t[:1] for t in teacher]
        assert _read_rows(a) != _read_rows(b)

        # the same endpoint written differently is the same cache entry
        port = one.httpd.server_address[1]
        same = f"http://user:{SECRET}@127.0.0.1:{port}/v1/?token={SECRET}"
        m = generate_propositions(path, {**cfg, "base_url": same}, tmp_path / "c" / "p.jsonl")
        assert len(one.requests) == 6
        manifest = json.loads(manifest_path(m).read_text())
        assert manifest["requests"]["cache_hits"] == 6
        assert manifest["cache_namespace"] == one.base_url

        # an explicit namespace: shared on purpose (e.g. a server that moved port)
        ns = {"cache_namespace": "my-tgi"}
        generate_propositions(path, {**cfg, **ns}, tmp_path / "d" / "p.jsonl")
        assert len(one.requests) == 12
        e = generate_propositions(
            path, {**cfg, **ns, "base_url": two.base_url}, tmp_path / "e" / "p.jsonl"
        )
        assert len(two.requests) == 6
        assert _read_rows(e) == _read_rows(a)
    finally:
        one.close()
        two.close()
    assert SECRET not in _all_text(cache, tmp_path / "c")
    entry = json.loads(next(cache.rglob("*.json")).read_text())
    assert entry["endpoint"] in (one.base_url, two.base_url, "my-tgi")


def _read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_skipped_passages_are_in_the_manifest(data, env, tmp_path, repo_root):
    path, passages, teacher, prompts = data
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "blank", "title": "T", "section": "", "text": " "}) + "\n")
    server = FakeChatServer({p: json.dumps(t) for p, t in zip(prompts, teacher)})
    try:
        cfg = _cfg(server, tmp_path / "cache", repo_root, on_error="skip")
        out = generate_propositions(path, cfg, tmp_path / "a" / "p.jsonl")
    finally:
        server.close()
    assert [r["id"] for r in _read_rows(out)] == [p["id"] for p in passages]
    skipped = json.loads(manifest_path(out).read_text())["skipped"]
    assert skipped["total"] == 1 and skipped["by_field"] == {"text": 1}
    assert f"{path}:7" in skipped["examples"][0]


def test_orphaned_cache_temps_of_dead_runs_are_removed(data, env, tmp_path, repo_root):
    """A run killed while writing replies leaves `xx/.key.json.<host>-<pid>.*.tmp` files; the
    next teacher removes the dead ones (and any older than a day), keeps a live writer's and
    every reply, which it then serves from the cache."""
    import os

    from densex.utils.io import tmp_tag

    path, passages, teacher, prompts = data
    server = FakeChatServer({p: json.dumps(t) for p, t in zip(prompts, teacher)})
    cache = tmp_path / "cache"
    try:
        cfg = _cfg(server, cache, repo_root)
        generate_propositions(path, cfg, tmp_path / "a" / "p.jsonl")
        replies = sorted(cache.rglob("*.json"))
        assert len(replies) == 6 and len(server.requests) == 6
        sub = replies[0].parent
        host = tmp_tag().rsplit("-", 1)[0]
        dead = sub / f".{replies[0].name}.{host}-999999999.abc123.tmp"  # no such pid
        live = sub / f".{replies[0].name}.{tmp_tag()}.def456.tmp"  # this (live) process
        old = sub / ".x.json.otherhost-1.ghi789.tmp"  # another host's, two days old
        for p in (dead, live, old):
            p.write_text('{"content": "half a rep', encoding="utf-8")
        os.utime(old, (os.path.getmtime(old) - 2 * 86400,) * 2)
        generate_propositions(path, cfg, tmp_path / "b" / "p.jsonl")
        assert not dead.exists() and not old.exists() and live.exists()
        assert sorted(cache.rglob("*.json")) == replies and len(server.requests) == 6
    finally:
        server.close()


def test_teacher_settings_defaults_are_the_teachers_own() -> None:
    """The `propositionizer=teacher` schema states `Teacher`'s defaults; they may not drift."""
    import dataclasses
    import inspect

    from densex.propositionizer.settings import TeacherSettings
    from densex.propositionizer.teacher import Teacher

    params = inspect.signature(Teacher).parameters
    renamed = {"prompt": "prompt_path"}
    compared = []
    for f in dataclasses.fields(TeacherSettings):
        arg = params.get(renamed.get(f.name, f.name))
        if arg is None or arg.default is inspect.Parameter.empty or f.name == "cache_dir":
            continue  # not a Teacher argument, required, or resolved by the caller (cache_dir)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        expected = list(arg.default) if isinstance(arg.default, tuple) else arg.default
        assert default == expected, f.name
        compared.append(f.name)
    assert len(compared) >= 12, compared  # every shared argument was checked

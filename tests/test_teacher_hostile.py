"""A hostile OpenAI-compatible server on 127.0.0.1 (issue 10): absurd replies are contained
(rejected, counted, never cached, the passage named), a 401 echoing the key never prints it,
and a canary secret (API key in the environment, credentials in `base_url`) appears in no
file a teacher + evaluate run writes (run dir, Hydra configs, cache, W&B offline files) nor
in its output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.requires import require_module  # noqa: E402

require_module("openai", "openai>=1.40")

from densex.propositionizer.output import manifest_path  # noqa: E402
from densex.propositionizer.teacher import Teacher, TeacherError  # noqa: E402
from helpers.env import subprocess_env  # noqa: E402
from helpers.hostile import HostileServer  # noqa: E402
from helpers.typed import generate_propositions  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
KEY = "sk-canary-4b1d9e7f2a6c8e0d-DO-NOT-LEAK"
URL_SECRET = "urlpw-canary-77c3f1e9a2"
KEY_ENV = "DENSEX_CANARY_KEY"


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    s = HostileServer()
    yield s
    s.close()


def _passages(tmp_path: Path, n: int = 4) -> tuple[Path, list[dict]]:
    lines = (DEMO / "passages.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:n]
    path = tmp_path / "passages.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path, [json.loads(x) for x in lines]


def _cfg(server: HostileServer, cache: Path, **kw) -> dict:
    return {
        "type": "teacher",
        "model": "hostile-1",
        "base_url": server.url(),
        "api_key_env": KEY_ENV,
        "max_concurrency": 2,
        "max_retries": 1,
        "backoff_base": 0.0,
        "backoff_max": 0.0,
        "cache_dir": str(cache),
        "fallback": "passage",
        "spacy_model": "",
        **kw,
    }


def test_hostile_replies_are_rejected_counted_and_never_cached(server, tmp_path):
    path, passages = _passages(tmp_path)
    nested = "[" * 5000 + "]" * 5000  # before: RecursionError, cached, every rerun crashed
    server.override = {passages[0]["text"]: nested, passages[1]["text"]: json.dumps(["y" * 10**6])}
    cache, out = tmp_path / "cache", tmp_path / "out" / "propositions.jsonl"
    generate_propositions(path, _cfg(server, cache), out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [p["id"] for p in passages]
    assert rows[0]["propositions"] == [passages[0]["text"].strip()]  # the fallback
    man = json.loads(manifest_path(out).read_text())
    assert man["bad_replies"]["final"] == 2
    assert set(man["bad_replies"]["reasons"]) == {"rejected: too_deep", "rejected: too_long"}
    assert len(list(cache.rglob("*.json"))) == 2  # only the two good replies are cached
    before = len(server.requests)
    server.override = {}
    generate_propositions(path, _cfg(server, cache), out)  # the rerun asks again, no crash
    assert len(server.requests) - before == 2
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows[0]["propositions"]) > 1


def test_a_401_echoing_the_key_is_not_printed(server, tmp_path):
    path, passages = _passages(tmp_path, 1)
    server.mode = "401"
    teacher = Teacher(model="m", base_url=server.url(), api_key_env=KEY_ENV, cache_dir=tmp_path)
    with pytest.raises(TeacherError) as e:
        teacher.reply(passages[0])
    assert KEY in server.requests[0]["auth"]  # the key was really sent
    text = str(e.value)
    assert KEY not in text and "HTTP 401" in text and repr(passages[0]["id"]) in text
    chained = e.value.__cause__ or e.value.__context__
    assert chained is None or KEY not in str(chained)  # before: openai's error, key and all


@pytest.mark.slow
def test_canary_secret_appears_nowhere(server, tmp_path):
    """evaluate.py with propositionizer=teacher and logger=wandb (offline): once against a
    working server, once against a 401 that echoes the key. grep -r finds neither secret."""
    env = subprocess_env(
        WANDB_MODE="offline", WANDB_DIR=str(tmp_path / "wandb-home"), OPENAI_API_KEY=KEY
    )
    base = [
        sys.executable,
        str(REPO / "evaluate.py"),
        "corpus=demo",
        "dataset=demo",
        "granularity=proposition",
        "propositionizer=teacher",
        "propositionizer.model=hostile-1",
        "propositionizer.max_retries=0",
        "propositionizer.spacy_model=",
        "logger=wandb",
        "limit_questions=10",
        "topk=[1,5]",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
    ]
    outputs = []
    # with credentials in the URL httpx sends them as Basic auth instead of the key, so the 401
    # run (which must echo the key) uses the plain URL
    urls = {"ok": server.url("densex:" + URL_SECRET), "401": server.url()}
    for mode in ("ok", "401"):
        server.mode = mode
        run = tmp_path / f"run-{mode}"
        cmd = [*base, f"propositionizer.base_url={urls[mode]}", f"hydra.run.dir={run}"]
        cmd.append(f"paths.cache_dir={tmp_path / f'cache-{mode}'}")
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        outputs.append(proc.stdout + proc.stderr)
        assert (proc.returncode == 0) == (mode == "ok"), proc.stderr[-4000:]
    assert "HTTP 401" in outputs[1]
    assert any(KEY in r["auth"] for r in server.requests)  # the key was really sent
    assert list((tmp_path / "run-ok" / "wandb").rglob("*.wandb"))  # W&B wrote its files
    assert (tmp_path / "run-ok" / ".hydra" / "overrides.yaml").exists()
    for secret in (KEY, URL_SECRET):
        hits = subprocess.run(
            ["grep", "-rl", "--binary-files=text", secret, str(tmp_path)],
            capture_output=True,
            text=True,
        ).stdout.split()
        assert not hits, f"{secret[:12]}... found in {hits}"
        assert all(secret not in out for out in outputs)

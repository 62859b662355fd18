"""The reliability table (issues 10 and 23) as a test: every fault tried through the real
entry points (`index.py`, `evaluate.py`, `train.py`), so a merge cannot silently undo one.

| fault | before the fix | now |
|---|---|---|
| one 0xE9 byte on line 5 of a passages file | `UnicodeDecodeError ... position 2387`, 18-line traceback (preflight) | exit 2, one line `FILE:5: invalid UTF-8 byte 0xe9 at byte offset N` |
| the same with `corpus.on_error=skip`, + a text that is a number / a list | traceback; wrong types "missing or empty" | units built from the other lines, the skips counted by field in the manifest, the type named |
| credentials in `propositionizer.base_url` | in `.hydra/config.yaml`, `overrides.yaml`, `hydra.yaml` | redacted everywhere |
| a cached `passage.jsonl` truncated | reused ("units: reusing"), wrong recall, exit 0 | `cache.on_damaged=refuse`: exit 2 naming the file; default: rebuilt |
| orphan `.*.tmp` files of a killed run | left forever | removed at the next start |
| teacher replies nested 5,000 deep, 3 MB of garbage, a 1 MB string | `RecursionError`, cached, every rerun crashed; garbage accepted | rejected, counted, never cached; the fallback |
| `train.py ckpt_path=last` with no checkpoint | `FileNotFoundError` on a missing path, after the model was built | preflight: exit 2, one line, "there is no checkpoint", names the run dir, before torch is imported |
| `torch.load(weights_only=False)` | two places in training | none in the package |
| flipped bytes in a `.faiss` shard, a truncated `.npy` shard (slow) | R@1 73.3 instead of 74.0, exit 0; `mmap length is greater than file size` | both detected, rebuilt, the clean run's results |
| a bad question line with `dataset.on_error=skip`, a 10,000-word unit (slow) | skips only in the log; silent truncation | `n_questions_skipped` in `results.jsonl`; `truncated_units` in the manifest |
| a cache on a full 1 MB tmpfs (slow) | 70-line traceback, `OSError: 82944 requested and 65504 written` | exit 2, one line: the file, the planner's estimate, the space free; after enlarging, the clean run's results |
| concurrent runs on one cache | everything built twice | `tests/test_concurrency.py`, `tests/test_locks.py` |
| SIGKILL at random points | - | `tests/test_kill_resume.py` (slow) |
| a 401 that echoes the key, a canary secret | key in the traceback | `tests/test_teacher_hostile.py` |

The fast cases run six short `index.py` commands on the demo corpus (no encoding) in this
process (`helpers.inproc.run_script`: the entry script, argv and Hydra, its exit status and
output, without a new interpreter) and one `train.py` process (its preflight exits before torch
is imported); the ones that encode or need a tmpfs are `slow` and start processes. The same
line-5 error of `index.py` in a process of its own: `tests/test_untrusted_bytes.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.env import subprocess_env
from helpers.inproc import run_script

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
ENV = subprocess_env(COLUMNS="1000")
COMMON = ("trainer=cpu", "trainer.enable_progress_bar=false")
URL_SECRET = "urlpw-fault-table-5e1c"


def _entry(
    script: str, run: Path, cache: Path, *overrides: str, env=None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / script), f"hydra.run.dir={run}", f"paths.cache_dir={cache}"]
    return subprocess.run(
        [*cmd, *COMMON, *overrides],
        cwd=REPO,
        env=env or ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture
def entry(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """`_entry` run in this process: `entry(script, run, cache, *overrides, env={...},
    unset=(...))` returns the same CompletedProcess (exit status, stdout, stderr); `env` adds
    variables, `unset` removes some, both for this test only."""

    def run_here(
        script: str, run: Path, cache: Path, *overrides: str, env=None, unset=()
    ) -> subprocess.CompletedProcess:
        monkeypatch.setenv("COLUMNS", "1000")
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        for key in unset:
            monkeypatch.delenv(key, raising=False)
        args = [f"hydra.run.dir={run}", f"paths.cache_dir={cache}", *COMMON, *overrides]
        capfd.readouterr()  # only this run's output
        status = run_script(script, *args)
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess([script, *args], status, out, err)

    return run_here


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The error line of a run that must end in exit 2 with one line and no traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    return proc.stderr.strip().splitlines()[-1]


def _bad_passages(tmp_path: Path, wrong_types: bool = False) -> Path:
    lines = (DEMO / "passages.jsonl").read_bytes().splitlines(keepends=True)[:8]
    lines[4] = lines[4].replace(b"the", b"th\xe9", 1)  # one non-UTF-8 byte on line 5
    if wrong_types:
        lines.append(json.dumps({"id": "num", "title": "T", "text": 5}).encode() + b"\n")
        lines.append(json.dumps({"id": "lst", "title": "T", "text": ["x"]}).encode() + b"\n")
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def test_non_utf8_byte_on_line_5_is_one_located_line(tmp_path, entry):
    p = _bad_passages(tmp_path)
    proc = entry("index.py", tmp_path / "run", tmp_path / "cache", "corpus=demo",
                  "stage=units", f"corpus.passages={p}")  # fmt: skip
    line = _one_line_error(proc)
    assert re.search(
        rf"(^|: ){re.escape(str(p))}:5: invalid UTF-8 byte 0xe9 at byte offset \d+$", line
    ), line


def test_bad_lines_are_skipped_and_counted_by_field_with_the_type_found(tmp_path, entry):
    p = _bad_passages(tmp_path, wrong_types=True)
    cache = tmp_path / "cache"
    proc = entry("index.py", tmp_path / "run", cache, "corpus=demo", "stage=units",
                  f"corpus.passages={p}", "corpus.on_error=skip")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (manifest,) = (cache / "units").rglob("manifest.json")
    man = json.loads(manifest.read_text())
    # 3 bad passage lines (line 5's byte, two wrong types), and the demo propositions of the 44
    # passages this 7-passage file lacks, skipped by the same policy with their own line each
    assert man["passages"] == 7 and man["skipped"]["total"] == 47
    assert man["skipped"]["by_field"] == {"record": 1, "text": 2, "id": 44}
    examples = " ".join(map(str, man["skipped"]["examples"]))
    assert "invalid UTF-8 byte 0xe9" in examples and ":5:" in examples
    assert "int" in examples and "list" in examples  # the type found, not "missing or empty"


def _units_dir(cache: Path) -> Path:
    (manifest,) = (cache / "units").rglob("manifest.json")
    return manifest.parent


def test_secrets_redacted_damaged_units_refused_or_rebuilt_orphans_removed(tmp_path, entry):
    from densex.utils.io import tmp_tag

    cache = tmp_path / "cache"
    secret_url = f"http://densex:{URL_SECRET}@127.0.0.1:9/v1"
    args = ("corpus=demo", "stage=units", "propositionizer=teacher",
            "propositionizer.model=m", f"propositionizer.base_url={secret_url}")  # fmt: skip
    clean = entry("index.py", tmp_path / "run0", cache, *args)
    assert clean.returncode == 0, clean.stderr[-3000:]
    hydra_files = list((tmp_path / "run0" / ".hydra").glob("*.yaml"))
    assert len(hydra_files) == 3
    for f in hydra_files:  # before: the password in all three
        assert URL_SECRET not in f.read_text(), f
    assert URL_SECRET not in clean.stdout + clean.stderr

    units = _units_dir(cache)
    good = (units / "passage.jsonl").read_bytes()
    (units / "passage.jsonl").write_bytes(b"".join(good.splitlines(keepends=True)[:40]))
    refused = entry("index.py", tmp_path / "run1", cache, *args, "cache.on_damaged=refuse")
    line = _one_line_error(refused)
    assert str(units / "passage.jsonl") in line and "damaged units" in line

    dead = 4_000_000  # above pid_max: no such process
    orphan = units / f".passage.jsonl.{tmp_tag().rsplit('-', 1)[0]}-{dead}.x1y2.tmp"
    orphan.write_bytes(b"half a file")
    rebuilt = entry("index.py", tmp_path / "run2", cache, *args)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "damaged units" in " ".join((rebuilt.stdout + rebuilt.stderr).split())
    assert (units / "passage.jsonl").read_bytes() == good
    assert not orphan.exists()


def test_hostile_teacher_replies_are_rejected_counted_and_never_cached(tmp_path, entry):
    pytest.importorskip("openai")
    from helpers.hostile import HostileServer

    lines = (DEMO / "passages.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:4]
    p = tmp_path / "passages.jsonl"
    p.write_text("".join(lines), encoding="utf-8")
    texts = [json.loads(x)["text"] for x in lines]
    server = HostileServer()
    try:
        server.override = {
            texts[0]: "[" * 5000 + "]" * 5000,  # before: RecursionError, cached
            texts[1]: "x" * 3_000_000,  # garbage: before, accepted as "repaired"
            texts[2]: json.dumps(["y" * 10**6]),
        }
        env = {"NO_PROXY": "127.0.0.1,localhost", "DENSEX_FAULT_KEY": "sk-none"}
        proxies = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")
        cache = tmp_path / "cache"
        proc = entry(
            "index.py", tmp_path / "run", cache, "stage=propositions", "corpus=demo",
            f"corpus.passages={p}", "corpus.propositions=null", "propositionizer=teacher",
            "propositionizer.model=hostile-1", f"propositionizer.base_url={server.url()}",
            "propositionizer.api_key_env=DENSEX_FAULT_KEY", "propositionizer.max_retries=1",
            "propositionizer.backoff_base=0", "propositionizer.backoff_max=0",
            "propositionizer.fallback=passage", "propositionizer.spacy_model=", env=env,
            unset=proxies,
        )  # fmt: skip
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    (out,) = (cache / "propositions").rglob("propositions.jsonl")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["propositions"] for r in rows[:3]] == [[t.strip()] for t in texts[:3]]  # fallback
    man = json.loads((out.parent / "manifest.json").read_text())
    assert man["bad_replies"]["final"] == 3
    assert set(man["bad_replies"]["reasons"]) == {"rejected: too_deep", "rejected: too_long"}
    cached = list((cache / "teacher").rglob("*.json"))  # propositionizer.cache_dir
    assert len(cached) == 1  # only the good reply


def test_ckpt_path_last_without_a_checkpoint_says_so(tmp_path):
    run = tmp_path / "run"
    proc = _entry("train.py", run, tmp_path / "cache", "model=tiny", "ckpt_path=last")
    line = _one_line_error(proc)
    assert line.startswith("error (preflight): ckpt_path=last: there is no checkpoint"), line
    assert str(run / "checkpoints") in line


def test_no_unsafe_torch_load_in_the_package():
    pattern = re.compile(r"weights_only\s*=\s*False")
    hits = [str(p) for p in (REPO / "src").rglob("*.py") if pattern.search(p.read_text())]
    assert not hits, hits


# ------------------------------------------------------------------------ slow: encoding


def _metrics(run: Path) -> dict:
    row = json.loads((run / "results.jsonl").read_text())
    return {k: v for k, v in row.items() if not k.startswith("time_")}


@pytest.mark.slow
def test_damaged_index_and_embeddings_are_rebuilt_and_skips_counted(tmp_path):
    passages = (DEMO / "passages.jsonl").read_text(encoding="utf-8")
    long_text = " ".join(["word"] * 10_000)
    p = tmp_path / "passages.jsonl"
    p.write_text(passages + json.dumps({"id": "Long#0", "title": "Long", "text": long_text}) + "\n")
    q = tmp_path / "questions.jsonl"
    q.write_bytes((DEMO / "questions.jsonl").read_bytes() + b'{"id": "bad", "question": 5}\n')
    cache = tmp_path / "cache"
    args = ("corpus=demo", f"corpus.passages={p}", "corpus.propositions=null", "dataset=demo",
            f"dataset.path={q}", "dataset.on_error=skip", "topk=[1,5,20]")  # fmt: skip
    first = _entry("evaluate.py", tmp_path / "run0", cache, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    row = _metrics(tmp_path / "run0")
    assert row["n_questions_skipped"] == 1
    (emb_manifest,) = (cache / "embeddings").rglob("manifest.json")
    assert json.loads(emb_manifest.read_text())["truncated_units"]["examples"] == ["Long#0"]
    (shard,) = (cache / "index").rglob("*.faiss")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 400] = bytes(400)  # same size, bytes changed
    shard.write_bytes(bytes(data))
    (npy,) = (cache / "embeddings").rglob("emb-*.npy")
    npy.write_bytes(npy.read_bytes()[:1000])
    second = _entry("evaluate.py", tmp_path / "run1", cache, *args)
    assert second.returncode == 0, second.stderr[-3000:]
    text = " ".join((second.stdout + second.stderr).split())
    assert "damaged embeddings" in text and "new index" in text
    assert _metrics(tmp_path / "run1") == row


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" if not os.path.ismount(path) else f"remount,size={size}"
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                          capture_output=True).returncode == 0  # fmt: skip


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_a_rerun_after_freeing_space_is_clean(tmp_path):
    cache = tmp_path / "tmpfs"
    if os.geteuid() != 0 or not _mount_tmpfs(cache, "1m"):
        pytest.skip("mounting a 1 MB tmpfs needs root (mount -t tmpfs)")
    try:
        # units fit (~0.4 MB), the 472 propositions' vectors (0.7 MB) do not: as in issue 23
        args = ("corpus=demo", "dataset=demo", "granularity=proposition", "topk=[1,5,20]")
        full = _entry("evaluate.py", tmp_path / "run0", cache / "c", *args)
        line = _one_line_error(full)
        assert "no space left on device" in line and "(the planner's estimate)" in line
        assert re.search(r"needs [\d,]+ bytes .*, [\d,]+ bytes \(.*\) free there", line), line
        assert not list((cache / "c").rglob("*.tmp"))  # no partial file left
        assert not list((cache / "c" / "index").rglob("manifest.json"))
        assert _mount_tmpfs(cache, "64m")  # space freed
        again = _entry("evaluate.py", tmp_path / "run1", cache / "c", *args)
        assert again.returncode == 0, again.stderr[-3000:]
        clean = _entry("evaluate.py", tmp_path / "run2", tmp_path / "clean", *args)
        assert clean.returncode == 0, clean.stderr[-3000:]
        assert _metrics(tmp_path / "run1") == _metrics(tmp_path / "run2")
    finally:
        subprocess.run(["umount", str(cache)], capture_output=True)

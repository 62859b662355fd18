"""Real SIGKILL tests (issue 10): a subprocess is killed at a random point, rerun, and its
artifacts compared with an uninterrupted run's: no duplicates, no gaps, identical bytes.

Units, encoding (at a shard size the test sets), generation with a tiny T5, evaluate and
training mid-epoch (resumed from the newest checkpoint, weights compared after the same number
of steps with `trainer.deterministic=true`). Every test starts at least two interpreters, so
they are all `slow`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from helpers.env import subprocess_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ENV = subprocess_env(HYDRA_FULL_ERROR="1")
COMMON = ["trainer=cpu", "trainer.enable_progress_bar=false"]


def _cmd(script: str, run_dir: Path, cache: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / script),
        f"hydra.run.dir={run_dir}",
        f"paths.cache_dir={cache}",
        *COMMON,
        *overrides,
    ]


def _run(cmd: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def _kill_at(
    cmd: list[str],
    ready: Callable[[], bool],
    max_delay: float,
    seed: int,
    timeout: float = 900,
) -> bool:
    """Start `cmd`; once `ready()` holds, wait a random 0..max_delay s and SIGKILL its process
    group. True when it was killed before finishing."""
    rng = random.Random(seed)
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            time.sleep(rng.uniform(0, max_delay))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        return False
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _killed(
    cmd: list[str], outputs: list[Path], ready: Callable[[], bool], max_delay: float, seed: int
) -> bool:
    """`_kill_at` until the kill lands before the run finishes (a run that finished tests no
    resume): up to 4 tries, the delay halved and the run's `outputs` removed after each miss."""
    for attempt in range(4):
        if _kill_at(cmd, ready, max_delay / 2**attempt, seed + 100 * attempt):
            return True
        for out in outputs:
            shutil.rmtree(out, ignore_errors=True)
    return False


def _files(root: Path, pattern: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob(pattern))}


def _no_tmp_left(*roots: Path) -> None:
    for root in roots:
        left = [p for p in root.rglob("*.tmp")]
        assert not left, f"orphaned temp files: {left[:3]}"


def test_units_killed_at_random_then_rerun(tmp_path):
    ref_cache, cache = tmp_path / "ref", tmp_path / "cache"
    args = ("corpus=demo", "stage=units")
    _run(_cmd("index.py", tmp_path / "r0", ref_cache, *args))
    cmd = _cmd("index.py", tmp_path / "r1", cache, *args)
    ready = lambda: (cache / "units").exists()  # noqa: E731
    assert _killed(cmd, [cache, tmp_path / "r1"], ready, max_delay=1.5, seed=1)
    assert not list(cache.glob("units/*/*/manifest.json"))  # killed before the end
    _run(cmd)
    assert _files(cache / "units", "*.jsonl") == _files(ref_cache / "units", "*.jsonl")
    _no_tmp_left(cache)


def test_encoding_killed_mid_way_resumes_from_its_shards(tmp_path):
    ref_cache, cache = tmp_path / "ref", tmp_path / "cache"
    args = ("corpus=demo", "granularity=sentence", "stage=embed", "cache.embedding_shard_size=16")
    _run(_cmd("index.py", tmp_path / "r0", ref_cache, *args))
    cmd = _cmd("index.py", tmp_path / "r1", cache, *args)
    killed = _kill_at(
        cmd, lambda: any((cache / "embeddings").rglob("emb-*.npy")), max_delay=1.0, seed=2
    )
    assert killed
    _run(cmd)
    (man,) = (cache / "embeddings").rglob("manifest.json")
    manifest = json.loads(man.read_text())
    assert manifest["resumed_shards"] >= 1 and manifest["shard_size"] == 16
    assert manifest["encoded_this_run"] + 16 * manifest["resumed_shards"] >= manifest["count"]
    ref = _files(ref_cache / "embeddings", "*-*.*")
    got = _files(cache / "embeddings", "*-*.*")
    assert ref.keys() == got.keys() and ref == got  # every shard's ids and vectors, bit for bit
    _no_tmp_left(cache)


def test_generation_killed_mid_way_resumes(tmp_path, tiny_t5):
    ref_cache, cache = tmp_path / "ref", tmp_path / "cache"
    args = (
        "corpus=demo",
        "corpus.propositions=null",
        "stage=propositions",
        "propositionizer=model",
        f"propositionizer.model={tiny_t5}",
        "propositionizer.shard_size=4",
        "propositionizer.max_new_tokens=12",
        "propositionizer.spacy_model=",
    )
    _run(_cmd("index.py", tmp_path / "r0", ref_cache, *args))
    cmd = _cmd("index.py", tmp_path / "r1", cache, *args)
    assert _kill_at(
        cmd, lambda: any((cache / "propositions").rglob("shard-*.jsonl")), max_delay=1.0, seed=3
    )
    _run(cmd)
    (ref,) = (ref_cache / "propositions").rglob("propositions.jsonl")
    (got,) = (cache / "propositions").rglob("propositions.jsonl")
    assert got.read_bytes() == ref.read_bytes()
    manifest = json.loads((got.parent / "manifest.json").read_text())
    assert manifest["shards"]["reused"] >= 1 and manifest["shards"]["total"] == 13
    _no_tmp_left(cache)


def test_evaluate_killed_at_random_then_rerun(tmp_path):
    cache = tmp_path / "cache"
    args = ("corpus=demo", "dataset=demo", "granularity=proposition", "topk=[1,5,20]")
    _run(_cmd("evaluate.py", tmp_path / "ref", tmp_path / "ref-cache", *args))
    cmd = _cmd("evaluate.py", tmp_path / "run", cache, *args)
    assert _killed(cmd, [cache, tmp_path / "run"], lambda: cache.exists(), max_delay=8.0, seed=4)
    assert not (tmp_path / "run" / "results.jsonl").exists()  # killed before the end
    _run(cmd)
    for name in ("retrieval.json.gz", "recall_at_k.csv", "answer_recall_by_words.csv"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes()

    def metrics(d: Path) -> dict:
        row = json.loads((d / "results.jsonl").read_text())
        return {k: v for k, v in row.items() if not k.startswith("time_")}

    assert metrics(tmp_path / "run") == metrics(tmp_path / "ref")
    _no_tmp_left(cache, tmp_path / "run")


def test_training_killed_mid_epoch_resumes_to_the_same_weights(tmp_path, squad_open, minilm_path):
    """Bit for bit: every weight and optimizer tensor equal, and (`StepTrace`) every step saw the
    same batch, generator states, weights and optimizer state as the uninterrupted run."""
    args = (
        "model=tiny",
        "logger=csv",
        f"paths.data_dir={squad_open.parent}",
        f"model.metric.model_type={minilm_path}",
        "data.limit_train=64",
        "data.limit_val=4",
        "model.max_new_tokens=8",
        "model.batch_size=8",
        "trainer.max_epochs=2",
        "trainer.deterministic=true",
        "callbacks.step_checkpoint.every_n_train_steps=1",
        "+callbacks.trace._target_=densex.utils.resume.StepTrace",
    )
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    # the reference builds the tiny model, the killed run finds it cached (that used to shift
    # the global generator: tiny_t5 reseeded it)
    _run(
        _cmd(
            "train.py", ref_dir, tmp_path / "cache", *args, f"+callbacks.trace.path={ref_dir}.jsonl"
        )
    )
    cmd = _cmd(
        "train.py", run_dir, tmp_path / "cache", *args, f"+callbacks.trace.path={run_dir}.jsonl"
    )
    step_ckpt = run_dir / "checkpoints" / "last-step.ckpt"

    def in_epoch_1() -> bool:  # 8 steps per epoch: epoch 1 started once epoch_000.ckpt exists
        return (run_dir / "checkpoints" / "epoch_000.ckpt").exists() and step_ckpt.exists()

    assert _kill_at(cmd, in_epoch_1, max_delay=2.0, seed=5)
    _run([*cmd, "ckpt_path=last"])

    def trace(d: Path) -> dict[int, dict]:  # by step: a replayed step's last line counts
        rows = [json.loads(line) for line in Path(f"{d}.jsonl").read_text().splitlines()]
        return {r["global_step"]: r for r in rows}

    ref_trace, got_trace = trace(ref_dir), trace(run_dir)
    assert sorted(ref_trace) == sorted(got_trace) == list(range(16))
    for step, row in ref_trace.items():
        assert got_trace[step] == row, f"step {step} differs"

    def final(d: Path) -> dict:
        return torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)

    ref, got = final(ref_dir), final(run_dir)
    assert got["global_step"] == ref["global_step"] == 16
    assert ref["state_dict"].keys() == got["state_dict"].keys()
    for k, v in ref["state_dict"].items():
        assert torch.equal(v, got["state_dict"][k]), k
    ref_opt, got_opt = ref["optimizer_states"][0]["state"], got["optimizer_states"][0]["state"]
    for i, state in ref_opt.items():
        for name, v in state.items():
            assert torch.equal(v, got_opt[i][name]), (i, name)

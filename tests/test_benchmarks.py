"""Every benchmark runs at a tiny size, as a user would start it, so none can rot unnoticed:
each composes its config the way the entry scripts do, and its output says what it measured.
Most run in a fresh process; the two whose run is mostly the import of torch, transformers and
sentence-transformers (`st_encode.py`, `propositionizer_speed.py`) run as `__main__` in this
process (`helpers.inproc.run_script`: argv, the script's own `main`, its exit status), which
this process has imported already. Figures are never asserted (they live in the benchmarks'
printed ratios). The runs over 8 s are `slow` (`make test-slow`), so `make test` stays under
its budget."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.env import REPO, subprocess_env
from helpers.inproc import run_script


def run_here(capsys: pytest.CaptureFixture[str], script: str, *args: str) -> str:
    """stdout of `benchmarks/<script> args` run as `__main__` in this process (`run_script`
    restores what the benchmark sets for its run)."""
    capsys.readouterr()
    status = run_script(f"benchmarks/{script}", *args)
    out, err = capsys.readouterr()
    assert status == 0, f"{script} failed:\n{out[-2000:]}\n{err[-4000:]}"
    return out


def run_benchmark(script: str, *args: str, timeout: int = 300) -> str:
    """stdout of `benchmarks/<script> args` (stderr shown when it fails)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.slow  # over 8 s: `make test-slow`
def test_encode_throughput_composes_the_retriever_group(squad_open: Path) -> None:
    # the group YAML has `defaults: [schema, _self_]`: loading it directly failed
    out = run_benchmark("encode_throughput.py", "--n", "12", "--batch-size", "4",
                        "retriever.max_length=64")  # fmt: skip
    assert re.search(r"densex encode_units_to_dir: 12 units in [\d.]+s", out)
    assert re.search(r"ratio densex/ST \(encode stage\): [\d.]+", out)


def test_hash_retriever_benchmark(squad_open: Path) -> None:
    out = run_benchmark("hash_retriever.py", "--dims", "64", "--questions", "10", "--ks", "5")
    assert re.search(r"dim 64: [\d,]+ units/CPU-s", out)
    assert re.search(r"dim 64: recall @5 [01]\.\d{3}", out)


@pytest.mark.slow  # over 8 s: `make test-slow`
def test_set_f1_benchmark(squad_open: Path) -> None:
    out = run_benchmark(
        "set_f1_bench.py", "--passages", "1", "--square", "8", "--bs-batch-sizes", "64"
    )
    assert re.search(r"set-F1 8x8: densex / bert-score best = [\d.]+x +\|dF1\| ", out)
    assert re.search(r"one call/passage .* ratio +[\d.]+x +max \|dF1\| ", out)


@pytest.mark.slow  # over 8 s: `make test-slow`
def test_propositionizer_probe(squad_open: Path) -> None:
    out = run_benchmark(
        "propositionizer_probe.py", "--steps", "1", "--batch", "2", "--held-out", "2", "3e-4@1"
    )
    # spec, s/step, train loss, held-out loss, source-swap gap
    assert re.search(r"3e-4@1 +[\d.]+ +[\d.]+ +[\d.]+ +-?[\d.]+", out)


@pytest.mark.slow  # over 8 s: `make test-slow`
def test_scale_benchmark(tmp_path: Path) -> None:
    out = run_benchmark("scale.py", "--units", "800", "--work", str(tmp_path))
    assert re.search(r"\| 800 \| evaluate.py \(hash\) \| [\d.]+ \| \d+ \|", out)
    # memory sampled by phase: anonymous + mapped MB of encode, index build, search
    assert re.search(r"peak MB anon\+mapped: encode \d+\+\d+ build \d+\+\d+ search \d+\+\d+", out)


@pytest.mark.slow  # over 8 s: `make test-slow`
def test_peers_benchmark(squad_open: Path) -> None:
    out = run_benchmark("peers.py", "--n", "12", "--questions", "6", "--search-units", "3000",
                        "--queries", "40", "--square", "6")  # fmt: skip
    for runtime in ("torch", "onnx", "openvino", "openvino-bf16", "onnx-int8"):
        assert re.search(rf"densex +{runtime} +[\d.]+ units/s +\d+ tokens/s per core", out)
        assert re.search(rf"densex {runtime} +R@5 +[\d.]+ +R@20", out)
    assert re.search(r"sentence-transformers +torch +[\d.]+ units/s", out)
    assert re.search(r"search: densex / faiss IndexFlatIP defaults = [\d.]+x", out)
    assert re.search(r"set-F1 6x6: densex / bert-score best = [\d.]+x", out)
    assert re.search(r"encode: densex best / sentence-transformers best = \d+\.\d\dx\n$", out)


@pytest.mark.slow  # over 8 s: `make test-slow`
def test_haystack_search_benchmark(squad_train: Path, tmp_path: Path) -> None:
    # two squad-train articles' sentence cell, built in a fresh cache as evaluate.py would
    out = run_benchmark("haystack_search.py", "--queries", "40",
                        "corpus.titles.include=[Matter,Grape]", f"paths.cache_dir={tmp_path}")  # fmt: skip
    assert re.search(r"units of 21 passages, 40 queries, top-100 passages", out)
    assert re.search(r"densex retrieve_passages \(ShardedIndex defaults\) +[\d.]+ s", out)
    assert re.search(r"faiss IndexFlatIP \(defaults\) \+ numpy max/passage +[\d.]+ s", out)
    assert re.search(r"rankings: \d+ identical, \d+ differ only among scores tied .*, of 40", out)
    assert re.search(r"search: densex / plain faiss = [\d.]+x\n$", out)


def test_gpu_script_runs_at_toy_shapes_on_cpu() -> None:
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu.sh"), "--tiny"], cwd=REPO, capture_output=True,
        text=True, timeout=300, env=subprocess_env(PYTHON=sys.executable),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert re.search(r"encode MiniLM-L6 \(packaged weights\) bfloat16: [\d,]+ units/s", out)
    assert re.search(r"encode GTR-base-shaped T5 encoder \(random\) bfloat16: [\d,]+ units/s", out)
    assert re.search(r"search .*: 2,000 x 32 vectors, 16 queries, top-100: [\d,]+ queries/s", out)
    assert re.search(r"train toy T5: [\d.]+M parameters, batch 2 .* [\d,]+ tokens/s.* MFU", out)
    assert "gpu benchmark done" in out


def test_st_encode_runs_a_backend_in_another_interpreter(tmp_path: Path, capsys) -> None:
    # what peers.py --st-env runs in .peers/*: here with the torch backend of this interpreter
    # (in this process); it imports nothing of densex, which those interpreters lack
    tree = ast.parse((REPO / "benchmarks" / "st_encode.py").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "sentence_transformers" in imported
    assert not [m for m in imported if m.split(".")[0] in ("densex", "helpers")], imported
    texts = ["Paris is the capital of France.", "The Moon orbits the Earth.", "Bananas."]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (tmp_path / "q.jsonl").write_text(json.dumps({"text": "What is France's capital?"}) + "\n")
    out = run_here(capsys, "st_encode.py", "--backend", "torch", "--texts", str(tmp_path / "t.jsonl"),
                        "--out", str(tmp_path / "v.npy"), "--queries", str(tmp_path / "q.jsonl"),
                        "--queries-out", str(tmp_path / "q.npy"))  # fmt: skip
    info = json.loads(out.strip().splitlines()[-1])
    assert info["backend"] == "torch" and info["rate"] > 0 and info["transformers"]
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert vectors[0] @ vectors[1] < 0.5  # different sentences, different vectors
    (query,) = np.load(tmp_path / "q.npy")  # the queries, by the same model
    assert int(np.argmax(vectors @ query)) == 0


def test_propositionizer_speed_forces_the_teacher_length(
    squad_open: Path, copy_lm_dir: str, capsys
) -> None:
    # the session's untrained copy student (`build_copy_lm` of the packaged MiniLM, built once
    # per run, only read here): the timing path, not quality; one passage (its untrained output
    # runs to ~165 tokens, 2 s of this CPU's time per passage)
    out = run_here(
        capsys, "propositionizer_speed.py", "student:1", "tiny:2", "--batch", "2", "--student",
        copy_lm_dir, "--propositions", str(squad_open / "propositions.jsonl"),
    )  # fmt: skip
    assert re.search(r"^student +1 +[\d.]+ +[\d.]+ +[\d.]+ +[\d,]+$", out, re.M)
    rows = {r["spec"]: r for r in json.loads(out.splitlines()[-1])["rows"]}
    tiny = rows["tiny"]  # made to write what its JSON format needs for the teacher's lists
    assert tiny["forced_length"] > 20
    assert tiny["tokens_per_passage"] == tiny["forced_length"]
    assert rows["student"]["forced_length"] is None

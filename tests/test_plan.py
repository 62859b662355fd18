"""`index.py stage=plan`: the FactoidWiki budget arithmetic, the dimension lookup, the machine
verdicts, and the real CLI run offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from densex.pipelines.plan.machine import retriever_dim
from densex.pipelines.plan.run import plan
from densex.pipelines.plan.sizes import FACTOID_WIKI, GB, fits, nlist_for, plan_rows, sizes
from helpers.inproc import run_script


def _cfg(repo_root: Path, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        return compose("index", overrides=overrides)


def test_factoid_wiki_proposition_sizes() -> None:
    n = 256_885_003
    s = sizes(n, 768, bytes_per_unit=100.0)
    assert s["emb_fp32"] == n * 768 * 4 == 789_150_729_216  # the "~790 GB"
    assert s["emb_fp16"] == s["flat_fp16"] == n * 768 * 2
    assert s["flat_fp32"] == s["emb_fp32"]
    assert nlist_for(n) == 64_110  # 4 * sqrt(n), faiss_index's rule
    # IVF64 x PQ64: 64 code bytes + an 8-byte id per vector, centroids and codebooks
    assert s["ivfpq"] == n * 72 + 64_110 * 768 * 4 + 256 * 768 * 4
    assert 18.5 * GB < s["ivfpq"] < 18.8 * GB
    assert s["units"] == n * 100.0 and s["rows"] == n * 8.0
    assert nlist_for(1000) == 25 and nlist_for(10) == 1  # >= 39 training points per list


def test_retriever_dims_offline(repo_root: Path, minilm_path: str) -> None:
    gtr = _cfg(repo_root, ["retriever=gtr"]).retriever
    assert retriever_dim(gtr) == (768, "known dim of the paper retrievers")
    # the packaged MiniLM resolves locally: its config files say 384
    dim, source = retriever_dim(_cfg(repo_root, ["retriever=minilm"]).retriever)
    assert dim == 384 and "config" in source
    assert retriever_dim({"name": "hash", "type": "hash", "dim": 256})[0] == 256
    assert retriever_dim(_cfg(repo_root, ["retriever=bm25"]).retriever) == (None, "sparse")


def _rows(box: dict, budget_gb: float = 2.0) -> list[dict]:
    units = {
        g: {"count": n, "avg_words": w, "bytes_per_unit": 120.0}
        for g, (n, w) in FACTOID_WIKI.items()
    }
    retriever = {"name": "gtr", "type": "dense", "max_length": 256, "title": "prefix"}
    return plan_rows("factoid-wiki", units, retriever, 768, box, budget_gb, None, 20e9)


def test_what_fits_which_machine() -> None:
    node = {"ram_gb": 512, "disk_gb": 2000, "gpus": 8, "gpu_mem_gb": 80, "cores": 64,
            "queries": 3610}  # fmt: skip
    by_g = {r["granularity"]: r for r in _rows(node)}
    prop = by_g["proposition"]
    assert prop["shards"] == 395  # ceil(789 GB / 2 GB)
    assert prop["gpu_fp32_bytes"] == pytest.approx(789_150_729_216 / 8 + 1.5 * GB)
    # 789 GB / 8 = 98.6 GB per GPU does not fit 80 GB; in fp16 49.3 + 1.5 GB does
    assert fits(prop, node) == "Flat fp16 on 8 GPUs (faiss useFloat16)"
    two_nodes = {**node, "gpus": 16}
    assert fits(_rows(two_nodes)[2], two_nodes) == "Flat fp32 on 16 GPUs"
    four = {**node, "gpus": 4}  # 98.6 GB per GPU even in fp16: exact search from RAM/disk
    assert fits(_rows(four)[2], four) == "Flat fp32, 395 mmap shards"
    cpu_box = {**node, "gpus": 0}
    assert fits(prop, cpu_box) == "Flat fp32, 395 mmap shards"  # 791 GB > 0.8 x 512 GB RAM
    assert fits(by_g["passage"], cpu_box) == "Flat fp32 in RAM"
    laptop = {**cpu_box, "ram_gb": 24, "disk_gb": 70}
    assert fits(prop, laptop) == "does not fit: needs more disk"
    small_p = {**by_g["passage"]}
    assert fits(small_p, {**laptop, "disk_gb": 100}).startswith("IVF-PQ")


def test_plan_of_squad_open_includes_factoid_wiki(repo_root: Path, squad_open: Path,
                                                   tmp_path: Path) -> None:  # fmt: skip
    cfg = _cfg(repo_root, ["retriever=gtr", f"paths.cache_dir={tmp_path}", "plan.gpus=0"])
    rows = plan(cfg)
    labels = [(r["corpus"], r["granularity"]) for r in rows]
    assert labels[-3:] == [("factoid-wiki", g) for g in FACTOID_WIKI]
    squad = {r["granularity"]: r for r in rows if r["corpus"] == "squad-open"}
    lines = (squad_open / "passages.jsonl").read_text(encoding="utf-8").splitlines()
    passages = sum(1 for line in lines if line.strip())
    assert squad["passage"]["units"] == passages  # counted from the configured corpus's files
    assert squad["passage"]["count_source"].startswith("sampled passages.jsonl")
    assert 300 < squad["passage"]["bytes_per_unit"] < 1500


def test_cli_prints_the_factoid_wiki_budget_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`index.py stage=plan ...` run in this process (argv, Hydra, the stage; its output)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # any attempt to reach the network fails at once instead of hanging
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    status = run_script("index.py", "stage=plan", "corpus=factoid-wiki", "retriever=gtr",
                        f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.log_dir={tmp_path / 'logs'}", "plan.gpus=0")  # fmt: skip
    captured = capfd.readouterr()
    out = captured.out + captured.err
    assert status == 0, out
    assert "256,885,003" in out and "41,393,528" in out and "114,219,127" in out
    prop = next(
        line for line in out.splitlines() if "proposition" in line and "256,885,003" in line
    )
    assert "789 GB" in prop and "395 GB" in prop  # fp32 and fp16 embeddings / Flat
    assert "dim 768" in out
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_hash_retriever_plans_cpu_encoding_at_its_dim() -> None:
    box = {"ram_gb": 24, "disk_gb": 70, "gpus": 0, "gpu_mem_gb": 80, "cores": 2, "queries": 1000}
    units = {"proposition": {"count": 4_000_000, "avg_words": 11.2, "bytes_per_unit": 120.0}}
    hash_r = {"name": "hash", "type": "hash", "dim": 256}
    dim, _ = retriever_dim(hash_r)
    (row,) = plan_rows("synthetic", units, hash_r, dim, box, 2.0, None, 20e9)
    assert row["emb_fp32_bytes"] == 4_000_000 * 256 * 4  # 4.1 GB
    assert row["encode_on"] == "1 CPU process"
    assert row["fits"] == "Flat fp32 in RAM"

"""Propositionizer fine-tuning: data readers and split, batching, the Lightning run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from densex.pipelines.train import accumulation, world_size
from densex.propositionizer.data import (
    LengthGroupedSampler,
    PropositionDataModule,
    load_hf_pairs,
    load_jsonl_pairs,
    load_squad_open_pairs,
    split_by_title,
)
from densex.propositionizer.module import parse_prediction
from densex.utils.io import DataError


@pytest.fixture(scope="module")
def squad_pairs(squad_open):
    return load_squad_open_pairs(squad_open / "passages.jsonl", squad_open / "propositions.jsonl")


def write_lines(path: Path, rows) -> Path:
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows))
    return path


# ---- data --------------------------------------------------------------------------------------
def test_squad_open_pairs(squad_open, squad_pairs):
    assert len(squad_pairs) == 2203
    first = squad_pairs[0]
    assert first["id"] == "1973_oil_crisis#0-0"
    assert first["source"].startswith("Title: 1973 oil crisis. Section: . Content: The 1973 oil")
    with (squad_open / "propositions.jsonl").open(encoding="utf-8") as f:
        gold = json.loads(next(f))["propositions"]
    assert json.loads(first["target"]) == gold
    assert first["target"] == json.dumps(gold, ensure_ascii=False)


def test_missing_partner_is_a_located_error(tmp_path):
    passages = write_lines(
        tmp_path / "passages.jsonl",
        [
            {"id": "a", "title": "A", "section": "", "text": "x."},
            "\n",
            {"id": "b", "title": "B", "text": "y."},
        ],
    )
    props = write_lines(
        tmp_path / "props.jsonl",
        [{"id": "a", "propositions": ["x."]}, {"id": "zz", "propositions": ["y."]}],
    )
    with pytest.raises(DataError) as e:
        load_squad_open_pairs(passages, props)
    assert (e.value.path, e.value.line, e.value.field) == (str(props), 2, "id")
    write_lines(props, [{"id": "a", "propositions": ["x."]}])
    with pytest.raises(DataError) as e:
        load_squad_open_pairs(passages, props)
    assert (e.value.path, e.value.line, e.value.field) == (str(passages), 3, "id")
    write_lines(
        props, [{"id": "a", "propositions": ["x."]}, {"id": "b", "propositions": "not json"}]
    )
    with pytest.raises(DataError, match="propositions") as e:
        load_squad_open_pairs(passages, props)
    assert e.value.line == 2


def test_split_by_title_is_by_article_and_deterministic(squad_pairs):
    train, val = split_by_title(squad_pairs, 0.1)
    train_titles, val_titles = {p["title"] for p in train}, {p["title"] for p in val}
    assert not train_titles & val_titles
    assert len(train) + len(val) == len(squad_pairs)
    assert 1 <= len(val_titles) <= 10  # ~10% of 36 articles
    shuffled = list(reversed(squad_pairs))
    assert {p["id"] for p in split_by_title(shuffled, 0.1)[1]} == {p["id"] for p in val}
    assert {p["title"] for p in split_by_title(squad_pairs, 0.3)[1]} > val_titles
    assert split_by_title(squad_pairs, 0.0)[1] == []


def test_hf_dataset_format(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {
            "sources": [
                "Title: Leaning Tower of Pisa. Section: . Prior to restoration work, the tower leaned.",
                "Title: Eostre. Section: Theories. Content: Eostre is a goddess.",
            ],
            "targets": [json.dumps(["The tower leaned."]), json.dumps(["Eostre is a goddess."])],
        }
    )
    pairs = load_hf_pairs(ds)
    assert [p["title"] for p in pairs] == ["Leaning Tower of Pisa", "Eostre"]
    assert pairs[0]["source"] == ds[0]["sources"] and json.loads(pairs[1]["target"]) == [
        "Eostre is a goddess."
    ]
    datasets.DatasetDict({"train": ds, "valid": ds.select([1])}).save_to_disk(str(tmp_path / "hf"))
    assert len(load_hf_pairs(tmp_path / "hf", split="valid")) == 1
    bad = ds.map(lambda r, i: {"targets": "[broken" if i == 1 else r["targets"]}, with_indices=True)
    with pytest.raises(DataError) as e:
        load_hf_pairs(bad)
    assert (e.value.line, e.value.field) == (1, "targets")
    with pytest.raises(DataError, match="missing column"):
        load_hf_pairs(ds.rename_column("targets", "labels"))


def test_jsonl_formats_and_errors(tmp_path):
    path = write_lines(
        tmp_path / "pairs.jsonl",
        [
            {"source": "Title: A. Section: . Content: a.", "target": json.dumps(["a."])},
            {"sources": "Title: B. Section: . b.", "targets": ["b."]},
            {"id": "c", "title": "C", "section": "S", "text": "c.", "propositions": ["c."]},
        ],
    )
    pairs = load_jsonl_pairs(path)
    assert [p["title"] for p in pairs] == ["A", "B", "C"]
    assert pairs[2]["source"] == "Title: C. Section: S. Content: c." and pairs[2]["id"] == "c"
    write_lines(path, [{"source": "Title: A. Section: . a.", "target": "[1, 2]"}, {"text": "x"}])
    with pytest.raises(DataError) as e:
        load_jsonl_pairs(path)
    assert (e.value.line, e.value.field) == (1, "target")
    write_lines(path, [{"title": "T", "text": "x"}])
    with pytest.raises(DataError) as e:
        load_jsonl_pairs(path)
    assert (e.value.line, e.value.field) == (1, "propositions")


def test_length_grouped_sampler():
    lengths = [(i * 37) % 101 for i in range(100)]
    sampler = LengthGroupedSampler(lengths, batch_size=4, seed=3, mega_batches=5)
    first = list(sampler)
    assert sorted(first) == list(range(100)) and first == list(sampler)
    for start in range(0, 100, 20):  # sorted (longest first) within each mega-batch of 20
        chunk = [lengths[i] for i in first[start : start + 20]]
        assert chunk == sorted(chunk, reverse=True)
    sampler.set_epoch(1)
    assert list(sampler) != first


def test_datamodule_pads_dynamically_and_counts_truncation(squad_open, tiny_t5):
    from transformers import AutoTokenizer

    dm = PropositionDataModule(
        passages=str(squad_open / "passages.jsonl"),
        propositions=str(squad_open / "propositions.jsonl"),
        limit_train=16,
        limit_val=4,
        max_source_length=384,
        max_target_length=64,
        per_device_batch_size=4,
    )
    dm.set_tokenizer(AutoTokenizer.from_pretrained(tiny_t5, model_max_length=512))
    dm.setup("fit")
    assert dm.stats["train/pairs"] == 16 and dm.stats["val/pairs"] == 4
    assert dm.stats["train/truncated_targets"] == 16  # propositions lists are far over 64 tokens
    batches = list(dm.train_dataloader())
    assert len(batches) == 4
    for b in batches:
        n = b["attention_mask"].sum(1)
        assert b["input_ids"].shape[1] == int(n.max()) <= 384  # padded to the batch's longest
        assert (
            b["labels"].shape[1] <= 64 and (b["labels"] == -100).any() | (b["labels"] != -100).all()
        )
        assert len(b["id"]) == len(b["target"]) == b["input_ids"].shape[0]
    # every labelled sequence ends with </s>, also the truncated ones
    eos = dm.tokenizer.eos_token_id
    for b in batches:
        last = (b["labels"] != -100).sum(1) - 1
        assert (b["labels"][torch.arange(len(last)), last] == eos).all()


def test_parse_prediction():
    assert parse_prediction('["A is B.", "C is D."]') == ["A is B.", "C is D."]
    assert parse_prediction("<0x28><0x28>") is None
    assert parse_prediction('{"a": 1}') is None


def test_effective_batch_accumulation():
    assert accumulation(64, 8, 1) == 8
    assert accumulation(64, 16, 2) == 2
    assert accumulation(64, 48, 1) == 2  # ceil: 96 >= 64
    assert accumulation(64, 64, 4) == 1
    assert world_size({"devices": 2, "num_nodes": 2}) == 4
    assert world_size({"devices": [0, 1]}) == 2
    assert world_size({"devices": "auto", "accelerator": "cpu"}) == 1


@pytest.mark.parametrize("model", ["flan-t5-large", "flan-t5-base", "flan-t5-small", "tiny"])
def test_train_configs_compose(repo_root, model):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        cfg = compose(config_name="train", overrides=[f"model={model}"])
    assert cfg.model.batch_size in (64, 8) and cfg.model.lr > 0
    assert cfg.model.metric.num_layers in (17, 6)
    assert cfg.data.per_device_batch_size == cfg.model.per_device_batch_size
    assert cfg.callbacks.model_checkpoint.monitor == "val/set_f1"
    if model != "tiny":
        assert cfg.model.name_or_path == f"google/{model}"
        assert (cfg.model.lr, cfg.model.weight_decay, cfg.model.batch_size) == (1e-4, 1e-4, 64)


# ---- end to end ----------------------------------------------------------------------------------
def train(repo_root: Path, run_dir: Path, *overrides: str, timeout: int = 600) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env |= {"WANDB_MODE": "disabled", "PROJECT_ROOT": str(repo_root)}
    cmd = [sys.executable, "train.py", "model=tiny", "trainer=cpu", "logger=csv"]
    cmd += [f"hydra.run.dir={run_dir}", f"paths.cache_dir={run_dir.parent / 'cache'}"]
    cmd += ["trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1", *overrides]
    proc = subprocess.run(
        cmd, cwd=repo_root, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads((run_dir / "train_summary.json").read_text())


def test_train_resume_and_export(repo_root, squad_open, minilm_path, tmp_path):
    run_dir = tmp_path / "run"
    common = [
        f"paths.data_dir={squad_open.parent}",
        f"model.metric.model_type={minilm_path}",
        "data.limit_train=64",
        "data.limit_val=8",
        "model.max_new_tokens=24",
    ]
    # effective batch 16 = 8 per device x 2 accumulation steps; a baseline validation first
    common.append("model.batch_size=16")
    summary = train(repo_root, run_dir, *common, "trainer.max_epochs=2", "validate_first=true")
    m = pd.read_csv(run_dir / "csv" / "version_0" / "metrics.csv")
    loss = m.dropna(subset=["train/loss_epoch"]).set_index("epoch")["train/loss_epoch"]
    assert list(loss.index) == [0, 1] and loss[1] < loss[0]
    val = m.dropna(subset=["val/set_f1"])
    assert list(val["epoch"]) == [0, 0, 1]  # validate_first, then after each epoch
    assert val["val/set_f1"].between(0, 1).all() and (val["val/n_passages"] == 8).all()
    assert {"val/precision", "val/recall", "val/parse_rate", "val/loss"} <= set(m.columns)
    assert {"val/props_per_passage_gold", "val/props_per_passage_pred"} <= set(m.columns)
    assert summary["accumulate_grad_batches"] == 2
    assert summary["epochs"] == 2 and summary["global_step"] == 8  # 64 pairs / 16 per step x 2
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    assert len(list((run_dir / "val_predictions").glob("*.jsonl"))) == 3

    # resume: the second run continues at epoch 2 from this run dir's last.ckpt
    summary = train(repo_root, run_dir, *common, "trainer.max_epochs=3", "ckpt_path=last")
    m2 = pd.read_csv(run_dir / "csv" / "version_1" / "metrics.csv")
    assert set(m2["epoch"].dropna().astype(int)) == {2}
    assert summary["epochs"] == 3 and summary["global_step"] == 12

    # the export loads without densex and generates
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(run_dir / "hf_model")
    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir / "hf_model").eval()
    enc = tok(["Title: Rhine. Section: . Content: The Rhine is a river."], return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=8, do_sample=False)
    assert out.shape[0] == 1 and 1 < out.shape[1] <= 9
    assert (
        json.loads((run_dir / "hf_model" / "manifest.json").read_text())["kind"]
        == "propositionizer"
    )


def test_overfits_eight_pairs(repo_root, squad_open, minilm_path, tmp_path):
    """A tiny model memorises 8 short pairs: generation + parsing + set-F1 are wired right."""
    props = {}
    with (squad_open / "propositions.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            props[row["id"]] = row["propositions"]
    shortest = sorted(props, key=lambda k: len(json.dumps(props[k])))[:8]
    rows = []
    with (squad_open / "passages.jsonl").open(encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            if p["id"] in shortest:
                rows.append({**p, "propositions": props[p["id"]]})
    data = write_lines(tmp_path / "eight.jsonl", rows)
    epochs = 200
    summary = train(
        repo_root,
        tmp_path / "run",
        "data=jsonl",
        f"data.path={data}",
        "data.validate_on_train=true",
        f"model.metric.model_type={minilm_path}",
        f"trainer.max_epochs={epochs}",
        f"trainer.check_val_every_n_epoch={epochs}",
        "model.lr=3e-3",
        "model.batch_size=4",  # 2 steps per epoch: 400 updates
        "model.per_device_batch_size=4",
        "model.dropout=0",
        "model.scheduler=linear",
        "model.warmup_ratio=0.05",
        "model.tiny.d_model=128",
        "model.tiny.d_ff=256",
    )
    m = pd.read_csv(tmp_path / "run" / "csv" / "version_0" / "metrics.csv")
    val = m.dropna(subset=["val/set_f1"]).iloc[-1]
    assert val["val/n_passages"] == 8 and val["val/parse_rate"] == 1.0
    assert val["val/set_f1"] > 0.9
    assert summary["best_val_set_f1"] == pytest.approx(val["val/set_f1"], abs=1e-6)

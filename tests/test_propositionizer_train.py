"""Propositionizer fine-tuning: data readers and split, batching, the Lightning run end to end."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf

from densex.pipelines.train.checkpoints import best_checkpoint
from densex.pipelines.train.run import plan_batches
from densex.pipelines.train.setup import accumulation, batch_plan, build_loggers
from densex.propositionizer.data import PropositionDataModule
from densex.propositionizer.module import (
    PropositionizerModule,
    parse_prediction,
    prepare_model_path,
)
from densex.propositionizer.pairs import (
    load_hf_pairs,
    load_jsonl_pairs,
    load_squad_open_pairs,
    split_by_title,
)
from densex.propositionizer.sampler import LengthGroupedSampler
from densex.utils.io import DataError
from helpers.config import compose_config
from helpers.score_by_epoch import ScoreByEpoch


def _unlocked(names: list[str]) -> list[str]:
    """Directory entries without the build locks (`.<artifact>.lock`, utils/locks.py), which
    stay beside an artifact on purpose."""
    return sorted(n for n in names if not n.endswith(".lock"))


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
    import datasets  # a core dependency: its absence is an error, not a skip

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


def padding_fraction(lengths, batches) -> float:
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths[i] for b in batches for i in b) / padded


def batches_of(indices, batch_size):
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


@pytest.mark.parametrize(("n", "batch_size", "replicas"), [(1003, 8, 2), (1000, 8, 2), (521, 4, 3)])
def test_length_grouped_sampler_shards_whole_batches_per_rank(n, batch_size, replicas):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(10, 500, (n,), generator=g).tolist()
    samplers = [
        LengthGroupedSampler(lengths, batch_size, seed=7, num_replicas=replicas, rank=r)
        for r in range(replicas)
    ]
    # never re-wrapped (and reshuffled) by Lightning's distributed sampler
    assert all(isinstance(s, torch.utils.data.DistributedSampler) for s in samplers)
    shards = [list(s) for s in samplers]
    assert [len(x) for x in shards] == [len(s) for s in samplers]
    everything = [i for x in shards for i in x]
    assert sorted(everything) == list(range(n))  # disjoint and covering
    assert len({math.ceil(len(x) / batch_size) for x in shards}) == 1  # same number of batches
    for x in shards:
        assert padding_fraction(lengths, batches_of(x, batch_size)) < 0.05
    # Lightning's old wrapping (a shuffling DistributedSampler around it) padded a lot more
    shuffled = list(torch.utils.data.DistributedSampler(shards[0], 1, 0, shuffle=True, seed=7))
    assert padding_fraction(lengths, batches_of([shards[0][i] for i in shuffled], batch_size)) > 0.2
    assert [list(s) for s in samplers] == shards  # deterministic
    for s in samplers:
        s.set_epoch(1)
    assert [list(s) for s in samplers] != shards


def test_length_grouped_sampler_fewer_leftovers_than_ranks():
    samplers = [LengthGroupedSampler(list(range(9)), 4, num_replicas=2, rank=r) for r in (0, 1)]
    shards = [list(s) for s in samplers]
    assert [len(x) for x in shards] == [len(s) for s in samplers] == [5, 5]
    assert set(shards[0]) | set(shards[1]) == set(range(9))  # one item repeated, none lost


def test_datamodule_shards_train_and_validation_per_rank(squad_open, tiny_t5):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_t5, model_max_length=512)
    ids = {"train": [], "val": []}
    for rank in (0, 1):
        dm = PropositionDataModule(
            passages=str(squad_open / "passages.jsonl"),
            propositions=str(squad_open / "propositions.jsonl"),
            limit_train=40,
            limit_val=5,
            per_device_batch_size=4,
        )
        dm.set_tokenizer(tok)
        dm.setup("fit")
        dm.trainer = SimpleNamespace(world_size=2, global_rank=rank)
        train, val = dm.train_dataloader(), dm.val_dataloader()
        assert isinstance(train.sampler, LengthGroupedSampler) and train.sampler.num_replicas == 2
        assert isinstance(val.sampler, torch.utils.data.DistributedSampler)
        assert len(train) == 5
        ids["train"].append([i for b in train for i in b["id"]])
        ids["val"].append([i for b in val for i in b["id"]])
    assert sorted(ids["train"][0] + ids["train"][1]) == sorted(p["id"] for p in dm.train_pairs)
    assert len(ids["val"][0]) == len(ids["val"][1]) == 3  # 5 items, padded with one repeat
    assert set(ids["val"][0]) | set(ids["val"][1]) == {p["id"] for p in dm.val_pairs}


def test_pair_ids_must_be_unique(tmp_path):
    path = write_lines(
        tmp_path / "pairs.jsonl",
        [
            {"id": "2", "source": "Title: A. Section: . a.", "target": ["a."]},
            {"source": "Title: B. Section: . b.", "target": ["b."]},  # id = line number 2
        ],
    )
    with pytest.raises(DataError, match="duplicate id '2'") as e:
        load_jsonl_pairs(path)
    assert (e.value.path, e.value.line, e.value.field) == (str(path), 2, "id")
    write_lines(
        path,
        [
            {"id": "x", "source": "Title: A. Section: . a.", "target": ["a."]},
            {"source": "Title: B. Section: . b.", "target": ["b."]},
            {"id": "x", "source": "Title: C. Section: . c.", "target": ["c."]},
        ],
    )
    with pytest.raises(DataError) as e:
        load_jsonl_pairs(path)
    assert (e.value.line, e.value.field) == (3, "id")
    import datasets  # a core dependency: its absence is an error, not a skip

    ds = datasets.Dataset.from_dict(
        {
            "id": ["a", "b", "a"],
            "sources": ["Title: A. Section: . a.", "Title: B. Section: . b.", "Title: C. c."],
            "targets": [json.dumps([s]) for s in ("a.", "b.", "c.")],
        }
    )
    with pytest.raises(DataError) as e:
        load_hf_pairs(ds)
    assert (e.value.line, e.value.field) == (2, "id")
    assert len(load_hf_pairs(ds.remove_columns("id"))) == 3


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
        # every target is longer than 64 tokens, so each is cut to exactly 64 labelled tokens;
        # -100 (ignored) may only pad a row after its labelled prefix
        labelled = b["labels"] != -100
        assert b["labels"].shape[1] == 64 and (labelled.sum(1) == 64).all()
        prefix = torch.arange(b["labels"].shape[1]) < labelled.sum(1, keepdim=True)
        assert torch.equal(labelled, prefix)
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


@pytest.mark.parametrize(("devices", "nodes", "world"), [(2, 1, 2), (2, 2, 4), (1, 3, 3)])
def test_world_size_is_lightnings(repo_root, devices, nodes, world):
    """train.run sizes the batch plan by `trainer.world_size`: Lightning's count, not ours."""
    from hydra.utils import instantiate

    trainer_cfg = OmegaConf.load(repo_root / "conf" / "trainer" / "default.yaml")
    trainer = instantiate(
        trainer_cfg,
        accelerator="cpu",
        devices=devices,
        num_nodes=nodes,
        strategy="ddp",
        default_root_dir=None,
        precision="32-true",
        logger=False,
        enable_checkpointing=False,
    )
    assert trainer.world_size == world
    # plan_batches divides model.batch_size by that count and sets the trainer's accumulation
    cfg = OmegaConf.create({"model": {"batch_size": 48, "per_device_batch_size": 4}})
    per_device, accumulate = plan_batches(cfg, trainer)
    assert (per_device, accumulate) == (4, 48 // (4 * world))
    assert trainer.accumulate_grad_batches == accumulate
    assert per_device * trainer.world_size * accumulate == 48


def test_effective_batch_accumulation():
    assert accumulation(64, 8, 1) == 8
    assert accumulation(64, 16, 2) == 2
    assert accumulation(64, 64, 4) == 1
    # the effective batch is exactly batch_size, also on several devices
    assert batch_plan(64, 64, 4) == (16, 1)
    assert batch_plan(64, 32, 4) == (16, 1)  # flan-t5-base on 4 GPUs: 64, not 128
    assert batch_plan(64, 16, 2) == (16, 2)
    assert batch_plan(64, 8, 1) == (8, 8)
    assert batch_plan(64, None, 2) == (32, 1)
    assert batch_plan(8, 8, 1) == (8, 1)
    for per_device, devices in [(48, 1), (24, 1), (16, 3)]:  # 64 does not split exactly
        with pytest.raises(ValueError, match="model.batch_size=64"):
            batch_plan(64, per_device, devices)
    with pytest.raises(ValueError, match="smaller than the number of devices"):
        batch_plan(2, 8, 4)


def test_best_checkpoint_score_comes_from_the_file(tmp_path):
    """Under ddp_spawn the launcher process gets back only trainer.checkpoint_callback's
    best_model_path; the best score must come from the checkpoint file, and from the
    callback monitoring val/set_f1 whichever is first."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)))
    last = ModelCheckpoint(dirpath=tmp_path, filename="last", monitor=None)
    best = ModelCheckpoint(dirpath=tmp_path, filename="e{epoch}", monitor="val/set_f1", mode="max")
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        callbacks=[last, best],  # trainer.checkpoint_callback is the one without a monitor
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(ScoreByEpoch(), data, data)
    assert float(trainer.callback_metrics["val/set_f1"]) == pytest.approx(0.5)
    path, score, ckpt = best_checkpoint(trainer)
    assert score == pytest.approx(0.9) and ckpt["epoch"] == 1 and path == best.best_model_path
    # what the spawn launcher leaves in the main process: no scores, one path
    best.best_model_score, best.best_model_path = None, ""
    path, score, ckpt = best_checkpoint(trainer)
    assert score == pytest.approx(0.9) and ckpt["epoch"] == 1 and Path(path).name == "eepoch=1.ckpt"


def test_best_checkpoint_score_under_ddp_spawn(tmp_path, spawn_from_forkserver):
    """The real launcher: two spawned CPU processes (started by the forkserver of
    `spawn_from_forkserver`); the main process gets no score back."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    from densex.utils.trainer import CloseSpawnedProcessGroup

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)))
    last = ModelCheckpoint(dirpath=tmp_path, filename="last", monitor=None)
    best = ModelCheckpoint(dirpath=tmp_path, filename="e{epoch}", monitor="val/set_f1", mode="max")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_epochs=3,
        callbacks=[last, best, CloseSpawnedProcessGroup()],  # as pipelines/train/run.py adds it
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(ScoreByEpoch(), data, data)
    assert best.best_model_score is None and not best.best_model_path  # what spawn leaves
    path, score, ckpt = best_checkpoint(trainer)
    assert score == pytest.approx(0.9) and ckpt["epoch"] == 1 and Path(path).name == "eepoch=1.ckpt"


def test_wandb_logger_is_offline_without_login(cfg_train, tmp_path, monkeypatch):
    from pytorch_lightning.loggers import WandbLogger

    from densex.report.wandb_log import wandb_logged_in

    for var in ("WANDB_API_KEY", "WANDB_MODE", "NETRC"):
        monkeypatch.setenv(var, "x")  # recorded, so teardown restores the real value
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    assert not wandb_logged_in()
    overrides = ["logger=wandb", f"paths.output_dir={tmp_path}", "logger.wandb.log_model=true"]
    cfg = cfg_train(*overrides)
    (logger,) = build_loggers(cfg)
    assert isinstance(logger, WandbLogger)
    assert logger._offline and not logger._log_model  # offline cannot upload checkpoints
    assert logger._wandb_init["mode"] == "offline"  # explicit: W&B reads WANDB_MODE only once
    # an explicit WANDB_MODE is W&B's to apply (offline=True would overwrite it with dryrun)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    (logger,) = build_loggers(cfg)
    assert not logger._offline and logger._wandb_init["mode"] == "disabled"
    assert logger.experiment.disabled  # a no-op run, no account needed
    assert os.environ["WANDB_MODE"] == "disabled"
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.delenv("WANDB_MODE")
    assert wandb_logged_in() and not build_loggers(cfg)[0]._offline


def test_export_swaps_atomically(tiny_t5, tmp_path, monkeypatch):
    """A failed export leaves the previous one in place (it used to be deleted first)."""
    from densex.propositionizer import export as export_mod

    module = PropositionizerModule(str(tiny_t5))
    out = tmp_path / "hf_model"
    module.export_hf(out, run=1)
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(dst) == out and ".old." not in Path(src).name:
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(export_mod.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        module.export_hf(out, run=2)
    assert json.loads((out / "manifest.json").read_text())["run"] == 1
    assert (out / "config.json").exists() and _unlocked(os.listdir(tmp_path)) == ["hf_model"]
    monkeypatch.setattr(export_mod.os, "replace", real_replace)
    module.export_hf(out, run=3)
    assert json.loads((out / "manifest.json").read_text())["run"] == 3
    assert _unlocked(os.listdir(tmp_path)) == ["hf_model"]


def test_tiny_model_is_cached_by_texts_and_spec(tmp_path, monkeypatch):
    from densex.utils import tiny_t5

    texts = ["Title: A. Section: . Content: a b c.", '["a b c."]']
    spec = {"vocab_size": 400, "d_model": 16, "num_layers": 1, "num_heads": 2, "d_ff": 32}
    path = prepare_model_path("tiny", texts, tmp_path, tiny=spec)
    assert Path(path).parent == tmp_path / "tiny_t5" and (Path(path) / "config.json").exists()
    manifest = json.loads((Path(path) / "manifest.json").read_text())
    assert manifest["kind"] == "tiny_t5" and manifest["n_texts"] == 2 and manifest["d_model"] == 16
    assert prepare_model_path("tiny", texts, tmp_path, tiny=spec) == path
    assert str(tiny_t5.cached_tiny_t5(tmp_path, texts, **spec)) == path
    assert prepare_model_path("tiny", texts[:1], tmp_path, tiny=spec) != path

    def broken(out, **kw):
        (Path(out) / "config.json").write_text("{}")
        raise RuntimeError("build failed")

    monkeypatch.setattr(tiny_t5, "build_tiny_t5", broken)
    target = tmp_path / "other" / "model"
    with pytest.raises(RuntimeError):
        tiny_t5.ensure_tiny_t5(target)
    assert (
        not target.exists() and _unlocked(os.listdir(target.parent)) == []
    )  # no half-built leftovers


@pytest.mark.parametrize("model", ["flan-t5-large", "flan-t5-base", "flan-t5-small", "tiny"])
def test_train_configs_compose(cfg_train, model):
    cfg = cfg_train(f"model={model}")
    assert cfg.model.batch_size in (64, 8) and cfg.model.optimizer.lr in (1e-4, 1e-3)
    assert cfg.model.metric.num_layers in (17, 6)
    assert cfg.data.per_device_batch_size == cfg.model.per_device_batch_size
    assert cfg.callbacks.model_checkpoint.monitor == "val/set_f1"
    if model != "tiny":
        assert cfg.model.name_or_path == f"google/{model}"
        opt = cfg.model.optimizer
        assert (opt._target_, opt.lr, opt.weight_decay, cfg.model.batch_size) == (
            "torch.optim.AdamW",
            1e-4,
            1e-4,
            64,
        )
        assert cfg.model.scheduler is None  # the paper's constant learning rate


# ---- end to end ----------------------------------------------------------------------------------
def train(repo_root: Path, run_dir: Path, *overrides: str) -> dict:
    """`python train.py model=tiny trainer=cpu logger=csv ... hydra.run.dir=run_dir`, run in
    this process (preflight, then `pipelines.train.run`, on one torch thread as the entry's
    subprocess had): the train summary."""
    from densex.pipelines.preflight.run import preflight
    from densex.pipelines.train.run import run

    cfg = compose_config(
        "train",
        *("model=tiny", "trainer=cpu", "logger=csv", f"paths.output_dir={run_dir}"),
        *(f"paths.cache_dir={run_dir.parent / 'cache'}", "trainer.enable_progress_bar=false"),
        *("trainer.log_every_n_steps=1", *overrides),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        preflight(cfg, "train")
        run(cfg)
    finally:
        torch.set_num_threads(threads)
    return json.loads((run_dir / "train_summary.json").read_text())


def test_train_resume_and_export(repo_root, squad_open, minilm_path, tmp_path):
    run_dir = tmp_path / "run"
    common = [
        f"paths.data_dir={squad_open.parent}",
        f"model.metric.model_type={minilm_path}",
        "data.limit_train=32",
        "data.limit_val=4",
        "model.max_new_tokens=24",
    ]
    # effective batch 16 = 8 per device x 2 accumulation steps; a baseline validation first
    common.append("model.batch_size=16")
    summary = train(repo_root, run_dir, *common, "trainer.max_epochs=2", "validate_first=true")
    m = pd.read_csv(run_dir / "csv" / "version_0" / "metrics.csv")
    loss = m.dropna(subset=["train/loss_epoch"]).set_index("epoch")["train/loss_epoch"]
    assert list(loss.index) == [0, 1] and loss[1] < loss[0], loss.to_dict()
    val = m.dropna(subset=["val/set_f1"])
    assert list(val["epoch"]) == [0, 0, 1]  # validate_first, then after each epoch
    assert val["val/set_f1"].between(0, 1).all() and (val["val/n_passages"] == 4).all()
    assert {"val/precision", "val/recall", "val/parse_rate", "val/loss"} <= set(m.columns)
    assert {"val/props_per_passage_gold", "val/props_per_passage_pred"} <= set(m.columns)
    assert summary["accumulate_grad_batches"] == 2
    assert summary["epochs"] == 2 and summary["global_step"] == 4  # 32 pairs / 16 per step x 2
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    assert len(list((run_dir / "val_predictions").glob("*.jsonl"))) == 3

    # resume: the second run continues at epoch 2 from this run dir's last.ckpt
    summary = train(repo_root, run_dir, *common, "trainer.max_epochs=3", "ckpt_path=last")
    m2 = pd.read_csv(run_dir / "csv" / "version_1" / "metrics.csv")
    assert set(m2["epoch"].dropna().astype(int)) == {2}
    assert summary["epochs"] == 3 and summary["global_step"] == 6

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


def _memorise(
    repo_root, squad_open, minilm_path, tmp_path, n_pairs: int, epochs: int, every: int, batch: int
):
    """Train the tiny model on the `n_pairs` squad-open pairs with the shortest gold lists,
    validating on those same pairs every `every` epochs (fp32, no dropout, lr 2e-3 with a
    linear schedule after 5% warm-up); assert that the best check parses every passage with
    set-F1 above 0.9, that the run's summary reports that check, and that the predictions
    dumped at the last check are the ones scored: generation, parsing and set-F1 wired right."""
    props = {}
    with (squad_open / "propositions.jsonl").open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            props[row["id"]] = row["propositions"]
    shortest = sorted(props, key=lambda k: len(json.dumps(props[k])))[:n_pairs]
    rows = []
    with (squad_open / "passages.jsonl").open(encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            if p["id"] in shortest:
                rows.append({**p, "propositions": props[p["id"]]})
    data = write_lines(tmp_path / "pairs.jsonl", rows)
    summary = train(
        repo_root,
        tmp_path / "run",
        "data=jsonl",
        f"data.path={data}",
        "data.validate_on_train=true",
        f"model.metric.model_type={minilm_path}",
        f"trainer.max_epochs={epochs}",
        f"trainer.check_val_every_n_epoch={every}",
        "model.optimizer.lr=2e-3",
        f"model.batch_size={batch}",
        f"model.per_device_batch_size={batch}",
        "model.dropout=0",
        "+model/scheduler=linear",
        "model.scheduler.warmup_ratio=0.05",
        "model.tiny.d_model=128",
        "model.tiny.d_ff=256",
    )
    m = pd.read_csv(tmp_path / "run" / "csv" / "version_0" / "metrics.csv")
    checks = m.dropna(subset=["val/set_f1"])
    assert len(checks) == epochs // every and (checks["val/n_passages"] == n_pairs).all()
    best = checks.loc[checks["val/set_f1"].idxmax()]
    assert best["val/parse_rate"] == 1.0 and best["val/set_f1"] > 0.9, checks.to_string()
    assert summary["best_val_set_f1"] == pytest.approx(best["val/set_f1"], abs=1e-6)
    # the predictions the writer dumped are the ones scored: parsed = valid JSON list
    dumped = sorted((tmp_path / "run" / "val_predictions").glob("*.jsonl"))[-1]
    rows = [json.loads(line) for line in dumped.read_text(encoding="utf-8").splitlines()]
    parsed = sum(isinstance(_json_or_none(r["prediction"]), list) for r in rows)
    assert parsed / len(rows) == checks["val/parse_rate"].iloc[-1]


def test_memorises_four_pairs(repo_root, squad_open, minilm_path, tmp_path):
    """The tiny model memorises the 4 shortest pairs in 100 updates (batch 4), checked every 25
    epochs. Measured on a 2-core AMD EPYC (AVX512-BF16), fp32: 4/4 parsed with set-F1 1.00 at
    epochs 49, 74 and 99 (epoch 24: 1/4); the same at lr 1.5e-3, 2.5e-3 and 3e-3 (set-F1
    0.976-1.00 from epoch 49 on): the best check has three checks of margin. The eight-pair
    run of the same assertions is `slow` (`test_overfits_eight_pairs`)."""
    _memorise(
        repo_root, squad_open, minilm_path, tmp_path, n_pairs=4, epochs=100, every=25, batch=4
    )


@pytest.mark.slow  # ~18 s of CPU; test_memorises_four_pairs asserts the same on 4 pairs
def test_overfits_eight_pairs(repo_root, squad_open, minilm_path, tmp_path):
    """A tiny model memorises 8 short pairs: generation + parsing + set-F1 are wired right.

    Validated every 20 epochs (200 updates of batch 4); the best check must parse all 8 passages
    with set-F1 above 0.9. Measured on a 2-core AMD EPYC (AVX512-BF16), fp32: every check from
    epoch 59 on parses 8/8, set-F1 0.96-0.99. At lr 3e-3 the same run oscillated between 7/8
    and 8/8 (one passage looping on a copied name), which is what failed on some CPUs; 2e-3
    converges."""
    _memorise(
        repo_root, squad_open, minilm_path, tmp_path, n_pairs=8, epochs=100, every=20, batch=4
    )


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


@pytest.mark.slow  # ~25 s of CPU
def test_debug_fast_dev_run_takes_one_step(repo_root, squad_open, minilm_path, tmp_path):
    """`debug=fast_dev_run` (conf/debug): one training and one validation batch, then export."""
    summary = train(
        repo_root,
        tmp_path / "run",
        "debug=fast_dev_run",
        f"paths.data_dir={squad_open.parent}",
        f"model.metric.model_type={minilm_path}",
        "data.limit_train=16",
        "data.limit_val=8",
        "model.max_new_tokens=8",
    )
    assert summary["global_step"] == 1 and summary["epochs"] == 1
    assert not (tmp_path / "run" / "checkpoints").exists()  # fast_dev_run writes none
    assert (tmp_path / "run" / "hf_model" / "config.json").exists()

"""Sharded, resumable, multi-process encoding and the cached searcher (load_or_build_searcher)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tests.helpers.config import group_config

from densex.retrieval import build as build_mod
from densex.retrieval.embedding_store import EmbeddingStore
from densex.retrieval.encode_lightning import EmbeddingShardWriter
from densex.utils.io import DataError, read_jsonl, write_jsonl
from helpers.typed import encode_units_to_dir, load_or_build_searcher

torch.set_num_threads(1)

CPU = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}


@pytest.fixture(scope="module")
def units_file(tmp_path_factory, squad_open: Path) -> Path:
    """The first 40 real squad-open passages as a units file (unit id = passage id)."""
    rows = [
        {"id": p["id"], "passage_id": p["id"], "title": p["title"], "text": p["text"]}
        for _, p in zip(range(40), read_jsonl(squad_open / "passages.jsonl"))
    ]
    path = tmp_path_factory.mktemp("units") / "passage.jsonl"
    write_jsonl(path, rows)
    return path


@pytest.fixture(scope="module")
def tiny_bert(tiny_bert_dir) -> dict:
    """The tiny random BERT as a contriever-style retriever config."""
    return {
        "name": "tiny",
        "query_model": str(tiny_bert_dir),
        "pooling": "mean",
        "similarity": "dot",
        "max_length": 128,
        "batch_size": 4,
        "device": "cpu",
    }


@pytest.fixture(scope="module")
def reference(units_file, tiny_bert, tmp_path_factory) -> EmbeddingStore:
    return encode_units_to_dir(
        units_file, tiny_bert, tmp_path_factory.mktemp("ref"), CPU, shard_size=8
    )


def test_shards_manifest_and_row_order(reference: EmbeddingStore, units_file, tiny_bert) -> None:
    from helpers.typed import build_retriever

    units = list(read_jsonl(units_file))
    assert reference.ids == [u["id"] for u in units]
    assert len(reference) == 40 and reference.dim == 32
    man = reference.manifest
    assert man["complete"] and man["count"] == 40 and man["dtype"] == "float32"
    assert [(s["start"], s["end"]) for s in man["shards"]] == [(i, i + 8) for i in range(0, 40, 8)]
    arr = np.load(reference.root / man["shards"][1]["file"], mmap_mode="r")
    assert isinstance(arr, np.memmap) and arr.shape == (8, 32)
    # length-sorted batching, yet rows come back in file order: equal to plain in-order encoding
    direct = build_retriever(tiny_bert).encode_units(units)
    np.testing.assert_allclose(reference.embeddings, direct, atol=1e-5)
    chunks = list(reference.iter_arrays(5))
    assert [s for s, _ in chunks][:3] == [0, 5, 8]
    np.testing.assert_array_equal(np.concatenate([c for _, c in chunks]), reference.embeddings)


def crash_after_shards(monkeypatch: pytest.MonkeyPatch, n: int):
    """Make the embedding writer raise once `n` shards are written; returns its original
    `_write_shard` (set it back to resume)."""
    original = EmbeddingShardWriter._write_shard

    def crash(self, shard, emb):
        if self.shards_written == n:
            raise RuntimeError("simulated crash")
        original(self, shard, emb)

    monkeypatch.setattr(EmbeddingShardWriter, "_write_shard", crash)
    return original


def test_crash_then_resume_equals_uninterrupted(
    reference, units_file, tiny_bert, tmp_path, monkeypatch
) -> None:
    original = crash_after_shards(monkeypatch, 2)
    out = tmp_path / "emb"
    with pytest.raises(RuntimeError, match="simulated crash"):
        encode_units_to_dir(units_file, tiny_bert, out, CPU, shard_size=8)
    assert not (out / "manifest.json").exists()
    assert len(list(out.glob("emb-*.npy"))) == 2
    assert not list(out.glob(".*tmp"))  # no half-written files left behind
    with pytest.raises(DataError, match="manifest.json"):
        EmbeddingStore.open(out)

    monkeypatch.setattr(EmbeddingShardWriter, "_write_shard", original)
    store = encode_units_to_dir(units_file, tiny_bert, out, CPU, shard_size=8)
    assert store.manifest["resumed_shards"] == 2 and store.manifest["encoded_this_run"] == 24
    assert store.ids == reference.ids
    np.testing.assert_allclose(store.embeddings, reference.embeddings, atol=1e-6)


def test_batches_stay_in_their_shard_so_a_resume_writes_the_same_bytes(
    units_file, minilm_path, tmp_path, monkeypatch
) -> None:
    """Batches of 5 over shards of 8 are cut within each shard: a run resumed after one shard
    (other pending shards, as on another rank) writes the uninterrupted run's bytes. Batches
    spanning shards would pad a unit to another shard's lengths and move its vector's last bits
    (what made 2 SLURM ranks differ from 1 process)."""
    spec = {"name": "minilm", "query_model": minilm_path, "pooling": "mean", "similarity": "cos",
            "max_length": 128, "batch_size": 5, "device": "cpu"}  # fmt: skip
    whole = encode_units_to_dir(units_file, spec, tmp_path / "whole", CPU, shard_size=8)
    original = crash_after_shards(monkeypatch, 1)
    with pytest.raises(RuntimeError, match="simulated crash"):
        encode_units_to_dir(units_file, spec, tmp_path / "resumed", CPU, shard_size=8)
    monkeypatch.setattr(EmbeddingShardWriter, "_write_shard", original)
    resumed = encode_units_to_dir(units_file, spec, tmp_path / "resumed", CPU, shard_size=8)
    assert resumed.manifest["resumed_shards"] == 1
    files = sorted(p.name for p in (tmp_path / "whole").glob("emb-*.npy"))
    assert len(files) == 5
    for name in files:
        assert (tmp_path / "resumed" / name).read_bytes() == (
            tmp_path / "whole" / name
        ).read_bytes(), name
    assert resumed.ids == whole.ids


def test_damaged_shard_is_reencoded(reference, units_file, tiny_bert, tmp_path) -> None:
    out = tmp_path / "emb"
    encode_units_to_dir(units_file, tiny_bert, out, CPU, shard_size=8)
    (out / "manifest.json").unlink()
    victim = out / "emb-0000000016-0000000024.npy"
    victim.write_bytes(victim.read_bytes()[:100])
    store = encode_units_to_dir(units_file, tiny_bert, out, CPU, shard_size=8)
    assert store.manifest["encoded_this_run"] == 8 and store.manifest["resumed_shards"] == 4
    np.testing.assert_allclose(store.embeddings, reference.embeddings, atol=1e-6)


def test_float16_storage(reference, units_file, tiny_bert, tmp_path) -> None:
    store = encode_units_to_dir(
        units_file, tiny_bert, tmp_path, CPU, shard_size=16, dtype="float16"
    )
    assert store.embeddings.dtype == np.float16 and store.manifest["dtype"] == "float16"
    np.testing.assert_allclose(
        store.embeddings.astype(np.float32), reference.embeddings, rtol=2e-3, atol=2e-3
    )


def test_bad_input_and_reused_dir_fail_with_location(units_file, tiny_bert, tmp_path) -> None:
    rows = [json.loads(line) for line in units_file.read_text().splitlines()[:3]]
    rows.append(dict(rows[1]))
    bad = tmp_path / "dup.jsonl"
    write_jsonl(bad, rows)
    with pytest.raises(DataError, match=r"dup.jsonl:4: field 'id': duplicate") as e:
        encode_units_to_dir(bad, tiny_bert, tmp_path / "x", CPU)
    assert e.value.line == 4 and e.value.field == "id"
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"id": "a", "text": "x"}\n{"id": "b"}\n')
    with pytest.raises(DataError, match=r"missing.jsonl:2: field 'text': missing"):
        encode_units_to_dir(missing, tiny_bert, tmp_path / "y", CPU)
    # a directory bound to one units file refuses another
    write_jsonl(tmp_path / "other.jsonl", rows[:2])
    encode_units_to_dir(tmp_path / "other.jsonl", tiny_bert, tmp_path / "z", CPU, shard_size=1)
    with pytest.raises(DataError, match="encoding.json.*units_sha256"):
        encode_units_to_dir(units_file, tiny_bert, tmp_path / "z", CPU, shard_size=1)
    with pytest.raises(DataError, match="encoding.json.*retriever"):  # same units, other model
        encode_units_to_dir(
            tmp_path / "other.jsonl",
            {**tiny_bert, "pooling": "cls"},
            tmp_path / "z",
            CPU,
            shard_size=1,
        )


def test_two_processes_equal_one(
    reference, units_file, tiny_bert, tmp_path, spawn_from_forkserver
) -> None:
    """ddp_spawn over gloo, devices=2: every unit once, same vectors as one process (the
    workers started by the forkserver of `spawn_from_forkserver`; the slow tests below spawn
    theirs)."""
    t0 = time.perf_counter()
    ddp = {**CPU, "devices": 2, "strategy": "ddp_spawn"}
    store = encode_units_to_dir(units_file, tiny_bert, tmp_path, ddp, shard_size=8)
    assert store.manifest["processes"] == 2
    assert store.ids == reference.ids
    np.testing.assert_allclose(store.embeddings, reference.embeddings, atol=1e-6)
    print(f"2-process encoding took {time.perf_counter() - t0:.1f}s")


def test_searcher_is_cached_and_finds_the_unit_itself(
    units_file, minilm_path, tmp_path, monkeypatch, repo_root
) -> None:
    cfg = group_config("retriever", "minilm")
    cfg.device = "cpu"
    cfg.query_max_length = cfg.max_length  # queries below are whole passages: no truncation
    index_cfg = group_config("index", "flat")
    index_cfg.num_shards = 2
    first = load_or_build_searcher(units_file, cfg, index_cfg, tmp_path, trainer_args=CPU)
    assert first.info["encoded"] and first.info["index_built"]
    assert first.ntotal == 40 and len(first.unit_ids) == 40
    units = list(read_jsonl(units_file))
    queries = [units[i]["title"] + " " + units[i]["text"] for i in (3, 17, 39)]
    scores, rows = first.search(queries, 5)
    assert rows[:, 0].tolist() == [3, 17, 39]
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-4)  # cosine of a text with itself
    assert (np.diff(scores, axis=1) <= 1e-6).all()

    def no_encoding(*args, **kwargs):
        raise AssertionError("a cached searcher must not encode")

    monkeypatch.setattr(build_mod, "encode_units_to_dir", no_encoding)
    monkeypatch.setattr(build_mod, "build_index_to_dir", no_encoding)
    second = load_or_build_searcher(units_file, cfg, index_cfg, tmp_path, trainer_args=CPU)
    assert not second.info["encoded"] and not second.info["index_built"]
    assert second.info["index_dir"] == first.info["index_dir"]
    s2, r2 = second.search(queries, 50)
    np.testing.assert_array_equal(r2[:, :5], rows)
    assert (r2[:, 40:] == -1).all()  # only 40 units
    # another index setting reuses the embeddings, builds a new index
    monkeypatch.undo()
    index_cfg.num_shards = 1
    third = load_or_build_searcher(units_file, cfg, index_cfg, tmp_path, trainer_args=CPU)
    assert not third.info["encoded"] and third.info["index_built"]
    assert third.info["embeddings_dir"] == first.info["embeddings_dir"]


def test_encoding_precision_is_the_retrievers_and_part_of_the_cache_key(
    reference, units_file, tiny_bert, tmp_path
) -> None:
    """`trainer.precision` (auto = bf16-mixed on a GPU) never reaches unit encoding: the
    retriever's `precision` (default 32-true) does, and it keys the embeddings cache."""
    from helpers.typed import build_retriever

    bf16_trainer = {**CPU, "precision": "bf16-mixed"}
    fp32 = load_or_build_searcher(units_file, tiny_bert, None, tmp_path, trainer_args=bf16_trainer)
    bf16_cfg = {**tiny_bert, "precision": "bf16-mixed"}
    bf16 = load_or_build_searcher(units_file, bf16_cfg, None, tmp_path, trainer_args=CPU)
    assert fp32.info["encoded"] and bf16.info["encoded"]
    assert fp32.info["embeddings_dir"] != bf16.info["embeddings_dir"]
    assert fp32.info["index_dir"] != bf16.info["index_dir"]
    e32 = EmbeddingStore.open(fp32.info["embeddings_dir"])
    e16 = EmbeddingStore.open(bf16.info["embeddings_dir"])
    assert e32.manifest["retriever"]["precision"] == "32-true"
    assert e16.manifest["retriever"]["precision"] == "bf16-mixed"
    # the default stays fp32 although the trainer config says bf16-mixed
    np.testing.assert_allclose(e32.embeddings, reference.embeddings, atol=1e-6)
    # bf16 autocast really ran (Lightning supports bf16-mixed on CPU)
    gap = np.abs(e16.embeddings - reference.embeddings).max()
    assert 1e-6 < gap < 0.05
    # queries/in-process encoding use the same autocast: closer to the bf16 units than fp32 ones
    units = list(read_jsonl(units_file))
    in_process = build_retriever(bf16_cfg).encode_units(units)
    assert in_process.dtype == np.float32
    assert np.abs(in_process - e16.embeddings).max() < gap / 2
    # a second call with the bf16 trainer finds the fp32 cache entry again
    again = load_or_build_searcher(units_file, tiny_bert, None, tmp_path, trainer_args=bf16_trainer)
    assert not again.info["encoded"]
    assert again.info["embeddings_dir"] == fp32.info["embeddings_dir"]


def test_changing_search_params_reuses_the_index(
    units_file, tiny_bert, tmp_path, monkeypatch
) -> None:
    """efSearch/nprobe and the recall check are applied at load time: no rebuild."""
    import faiss

    hnsw = {"name": "hnsw", "factory": "HNSW32", "params": {"efSearch": 16}, "recall_queries": 5}
    first = load_or_build_searcher(units_file, tiny_bert, hnsw, tmp_path, trainer_args=CPU)
    assert first.info["index_built"] and first.info["index_recall"]["params"] == {"efSearch": 16}

    def no_build(*args, **kwargs):
        raise AssertionError("changing search parameters must not rebuild the index")

    monkeypatch.setattr(build_mod, "encode_units_to_dir", no_build)
    monkeypatch.setattr(build_mod, "build_index_to_dir", no_build)
    changed = {**hnsw, "params": {"efSearch": 64}, "recall_queries": 20, "recall_k": 5}
    second = load_or_build_searcher(units_file, tiny_bert, changed, tmp_path, trainer_args=CPU)
    assert not second.info["index_built"]
    assert second.info["index_dir"] == first.info["index_dir"]
    shard = faiss.downcast_index(second.index.shards[0])
    assert shard.hnsw.efSearch == 64  # the new parameter is applied to the loaded index


def test_predict_trainer_from_hydra_node_plain_kwargs_or_none(tmp_path) -> None:
    """One predict-Trainer builder (encode + generate): predict-only settings, precision
    resolved, an explicit precision wins over the config's; the trainer node reaches it as
    the entry pipelines convert it (`pipelines.edge.trainer_args`)."""
    from densex.pipelines.edge import trainer_args
    from densex.utils.config import plain_settings
    from densex.utils.trainer import predict_trainer

    node = OmegaConf.create(
        {
            "paths": {"output_dir": str(tmp_path / "out")},
            "trainer": {
                "_target_": "pytorch_lightning.Trainer",
                "accelerator": "cpu",
                "devices": 1,
                "precision": "bf16-mixed",
                "enable_progress_bar": False,
                "default_root_dir": "${paths.output_dir}",
            },
        }
    )
    t = predict_trainer(trainer_args(node))
    assert t.precision == "bf16-mixed" and t.logger is None
    assert t.default_root_dir == str(tmp_path / "out")
    assert t.checkpoint_callback is None
    t = predict_trainer(trainer_args(node), root_dir=tmp_path / "enc", precision="32-true")
    assert t.precision == "32-true" and t.default_root_dir == str(tmp_path / "enc")
    # a standalone node whose interpolation cannot resolve is fine when root_dir replaces it
    alone = OmegaConf.create(OmegaConf.to_container(node.trainer, resolve=False))
    args = plain_settings(alone, optional=("default_root_dir",))
    assert "default_root_dir" not in args
    assert predict_trainer(args, root_dir=tmp_path).default_root_dir == str(tmp_path)
    with pytest.raises(Exception, match="output_dir"):  # not optional: the error is raised
        plain_settings(alone)
    t = predict_trainer(
        {**CPU, "precision": "auto"}, callbacks=[EmbeddingShardWriter(tmp_path, [], {}, "float32")]
    )
    assert t.precision == (
        "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"
    )
    assert any(isinstance(c, EmbeddingShardWriter) for c in t.callbacks)
    t = predict_trainer(None)
    assert t.num_devices == 1 and t.logger is None


@pytest.mark.slow  # two spawned interpreters (~50 s); the fast suite keeps test_two_processes_equal_one
def test_two_processes_on_the_arrow_units_equal_one(squad_open: Path, tiny_bert, tmp_path) -> None:
    """The units stage's Arrow tables, encoded by 2 gloo processes (ddp_spawn): the same
    shards, ids and vectors as 1 process; the spawned ranks get a path, not a table."""
    from helpers.typed import build_units

    rows = [p for p, _ in zip(read_jsonl(squad_open / "passages.jsonl"), range(30))]
    write_jsonl(tmp_path / "p.jsonl", rows)
    cfg = {"name": "t", "passages": str(tmp_path / "p.jsonl"), "granularities": ["passage"]}
    files = build_units(cfg, tmp_path / "units")
    assert (tmp_path / "units" / "arrow" / "passage" / "00000.arrow").exists()
    one = encode_units_to_dir(files["passage"], tiny_bert, tmp_path / "one", CPU, shard_size=8)
    ddp = {**CPU, "devices": 2, "strategy": "ddp_spawn"}
    two = encode_units_to_dir(files["passage"], tiny_bert, tmp_path / "two", ddp, shard_size=8)
    assert two.manifest["processes"] == 2 and two.ids == one.ids == [r["id"] for r in rows]
    np.testing.assert_allclose(two.embeddings, one.embeddings, atol=1e-6)


@pytest.mark.slow  # two spawned interpreters (~50 s); the fast suite keeps test_two_processes_equal_one
def test_more_processes_than_shards(reference, units_file, tiny_bert, tmp_path) -> None:
    """2 processes, 1 shard: the idle rank gets one probe row (Lightning wants a batch on every
    rank) that it never writes; the shard is written once, equal to one process's."""
    ddp = {**CPU, "devices": 2, "strategy": "ddp_spawn"}
    store = encode_units_to_dir(units_file, tiny_bert, tmp_path, ddp, shard_size=64)
    assert store.manifest["processes"] == 2 and len(store.manifest["shards"]) == 1
    assert store.ids == reference.ids
    np.testing.assert_allclose(store.embeddings, reference.embeddings, atol=1e-6)


def test_under_ddp_only_rank_0_builds_the_index(units_file, tiny_bert, tmp_path, monkeypatch):
    """A rank other than 0 encodes (its share of the shards) and gets no index: rank 0 builds
    it after every shard exists, then finds the encoding done."""
    from densex.retrieval.build import EncodedUnits

    monkeypatch.setenv("RANK", "1")
    other = load_or_build_searcher(units_file, tiny_bert, None, tmp_path, trainer_args=CPU)
    assert isinstance(other, EncodedUnits) and other.ntotal == 40 and other.info["encoded"]
    assert not list(tmp_path.glob("index/**/manifest.json"))
    with pytest.raises(RuntimeError, match="only rank 0 searches"):
        other.search(["q"], 1)
    monkeypatch.delenv("RANK")
    zero = load_or_build_searcher(units_file, tiny_bert, None, tmp_path, trainer_args=CPU)
    assert zero.info["index_built"] and not zero.info["encoded"] and zero.ntotal == 40

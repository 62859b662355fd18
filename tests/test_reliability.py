"""Issue 10: damaged caches are never reused, hostile teacher replies are contained, bad bytes and
types are located, over-long units are counted, training resumes from the newest checkpoint,
and no secret reaches a written file. Each test failed on the code before the fix."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.config import group_config

from densex.corpus.readers import Skips, read_passages
from densex.propositionizer.parse import parse_propositions
from densex.propositionizer.resolve import ParseStats, resolve_output
from densex.utils import integrity
from densex.utils.io import DataError, numbered_jsonl, read_json
from helpers.config import compose_config
from helpers.typed import build_units

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"


@pytest.fixture(autouse=True)
def _default_policy():
    integrity.reset()
    yield
    integrity.reset()


def _demo_corpus(tmp_path: Path) -> dict:
    return {
        "name": "demo",
        "passages": str(DEMO / "passages.jsonl"),
        "propositions": str(DEMO / "propositions.jsonl"),
        "segmentation": {"spacy_model": ""},
    }


# ---- 2. damaged cache artifacts --------------------------------------------------------------
def test_truncated_units_file_is_rebuilt_or_refused(tmp_path, caplog):
    corpus, out = _demo_corpus(tmp_path), tmp_path / "units"
    files = build_units(corpus, out)
    good = files["passage"].read_bytes()
    assert len(good.splitlines()) == 51
    files["passage"].write_bytes(b"".join(good.splitlines(keepends=True)[:40]))  # 51 -> 40 lines

    integrity.configure(on_damaged="refuse")
    with pytest.raises(integrity.DamagedArtifact) as e:
        build_units(corpus, out)
    assert "passage.jsonl" in str(e.value) and "size" in str(e.value) and "rm -r" in str(e.value)

    integrity.configure(on_damaged="rebuild")
    build_units(corpus, out)  # before the fix: "units: reusing" the 40-line file
    assert files["passage"].read_bytes() == good
    assert "damaged units" in caplog.text


def test_orphaned_temp_files_of_dead_runs_are_removed(tmp_path):
    corpus, out = _demo_corpus(tmp_path), tmp_path / "units"
    build_units(corpus, out)
    host = integrity.tmp_tag().rsplit("-", 1)[0]
    dead = out / f".passage.jsonl.{host}-999999999.abc123.tmp"  # no such pid
    live = out / f".passage.jsonl.{integrity.tmp_tag()}.def456.tmp"  # this (live) process
    dead.write_bytes(b"x" * 1000)
    live.write_bytes(b"y")
    build_units(corpus, out)
    assert not dead.exists() and live.exists()


def test_a_killed_bm25_builds_directory_is_removed_before_the_next_build(tmp_path, repo_root):
    """`utils.io.mkdtemp` build dirs carry the writer's host-pid: a dead writer's (a BM25 index
    killed mid-save) is removed when the index is next built; a live writer's is kept."""

    from densex.utils.io import mkdtemp
    from helpers.typed import load_or_build_searcher

    units = build_units(_demo_corpus(tmp_path), tmp_path / "units")["passage"]
    bm25 = group_config("retriever", "bm25")
    parent = tmp_path / "cache" / "bm25" / "bm25"
    parent.mkdir(parents=True)
    live = mkdtemp(parent, prefix=".abc.")
    host = integrity.tmp_tag().rsplit("-", 1)[0]
    dead = parent / f".abc.{host}-999999999.x1y2z3.tmp"  # the name mkdtemp gives, dead pid
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "vocab.json").write_bytes(b"x" * 2000)
    assert live.name.startswith(f".abc.{integrity.tmp_tag()}.") and live.name.endswith(".tmp")
    searcher = load_or_build_searcher(units, bm25, None, tmp_path / "cache")
    assert searcher.info["index_built"] and not dead.exists() and live.is_dir()


@pytest.fixture(scope="module")
def sentence_units(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("units")
    return build_units(_demo_corpus(out), out)["sentence"]


def _searcher(units: Path, tiny_bert_dir: Path, cache: Path, shard_size: int = 64):
    from helpers.typed import load_or_build_searcher

    retriever = {
        "name": "tiny",
        "query_model": str(tiny_bert_dir),
        "pooling": "mean",
        "similarity": "dot",
        "max_length": 64,
        "batch_size": 32,
        "device": "cpu",
    }
    trainer = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}
    return load_or_build_searcher(units, retriever, {"name": "flat"}, cache, trainer, shard_size)


def test_flipped_bytes_in_a_faiss_shard_are_detected(sentence_units, tiny_bert_dir, tmp_path):
    cache = tmp_path / "cache"
    s1 = _searcher(sentence_units, tiny_bert_dir, cache)
    queries = ["Which river flows through the valley?", "Who built the bridge?"]
    ref = s1.search(queries, 10)
    (shard,) = Path(s1.info["index_dir"]).glob("*.faiss")
    data = bytearray(shard.read_bytes())
    data[200:600] = bytes(255 - b for b in data[200:600])  # 400 bytes flipped, same size
    shard.write_bytes(bytes(data))

    integrity.configure(on_damaged="refuse")
    with pytest.raises(integrity.DamagedArtifact, match="content hash"):
        _searcher(sentence_units, tiny_bert_dir, cache)
    integrity.configure(on_damaged="rebuild")
    s2 = _searcher(sentence_units, tiny_bert_dir, cache)
    assert s2.info["index_built"] and not s2.info["encoded"]
    got = s2.search(queries, 10)
    assert np.array_equal(got[1], ref[1]) and np.allclose(got[0], ref[0])


def test_truncated_npy_shard_is_reencoded_alone(sentence_units, tiny_bert_dir, tmp_path):
    cache = tmp_path / "cache"
    s1 = _searcher(sentence_units, tiny_bert_dir, cache)
    emb_dir = Path(s1.info["embeddings_dir"])
    shards = sorted(emb_dir.glob("emb-*.npy"))
    assert len(shards) > 2
    ref = {p.name: p.read_bytes() for p in shards}
    with open(shards[1], "r+b") as f:
        f.truncate(shards[1].stat().st_size - 100)  # before: "mmap length is greater..."
    s2 = _searcher(sentence_units, tiny_bert_dir, cache)
    man = read_json(emb_dir / "manifest.json")
    assert man["resumed_shards"] == len(shards) - 1 and s2.info["encoded"]
    assert {p.name: p.read_bytes() for p in sorted(emb_dir.glob("emb-*.npy"))} == ref


def test_overlong_units_are_counted_with_their_ids(tmp_path, tiny_bert_dir):
    from densex.retrieval.encode import encode_units_to_dir
    from densex.retrieval.spec import RetrieverSpec

    units = tmp_path / "u.jsonl"
    rows = [
        {"id": "short", "passage_id": "p", "title": "T", "text": "A short unit."},
        {"id": "long", "passage_id": "p", "title": "T", "text": " ".join(["word"] * 10_000)},
    ]
    units.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = RetrieverSpec.from_cfg(
        {"name": "tiny", "query_model": str(tiny_bert_dir), "pooling": "mean", "max_length": 64}
    )
    trainer = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}
    store = encode_units_to_dir(units, spec, tmp_path / "emb", trainer, shard_size=8)
    assert store.manifest["truncated_units"] == {
        "count": 1,
        "examples": ["long"],
        "shards_unknown": 0,
    }


def test_shard_size_follows_the_corpus_and_the_config():
    from densex.retrieval.build import shard_size_for

    assert shard_size_for(51) == 256  # the floor
    assert shard_size_for(17_657) == 276  # squad-open propositions: 64 shards
    assert shard_size_for(257_000_000) == 24_000  # capped by the time bound (120 s x 200/s)
    assert shard_size_for(257_000_000, {"shard_units_per_second": 10_000}) == 50_000
    assert shard_size_for(10**6, {"embedding_shard_size": 1000}) == 1000


def test_shard_size_is_a_config_value(repo_root, tmp_path):
    from densex.pipelines.index.run import run

    overrides = [
        "corpus=demo",
        "granularity=passage",
        "stage=embed",
        "cache.embedding_shard_size=20",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.output_dir={tmp_path / 'run'}",
    ]
    cfg = compose_config("index", *overrides)
    run(cfg)
    (man,) = (tmp_path / "cache" / "embeddings").rglob("manifest.json")
    manifest = read_json(man)
    assert manifest["shard_size"] == 20 and len(manifest["shards"]) == 3  # 51 passages


# ---- 3. untrusted LLM output ------------------------------------------------------------------
def test_deep_nesting_is_rejected_without_recursion():
    raw = "[" * 5000 + "]" * 5000  # before: RecursionError in parse.resolve_output
    r = resolve_output(raw, "One sentence. Another one.", "passage")
    assert r.result.rejected == "too_deep" and r.reason == "rejected"
    assert r.propositions == ["One sentence. Another one."]
    # nesting within the limit still parses
    assert parse_propositions('{"propositions": ["a b", "c"]}').propositions == ["a b", "c"]


def test_reply_caps_are_enforced_and_counted():
    rng = np.random.default_rng(0)
    garbage = bytes(rng.integers(32, 127, 3_000_000, dtype=np.uint8)).decode()
    stats = ParseStats()
    for raw in (
        garbage,  # before: accepted as propositions ("repaired")
        json.dumps(["x" * 1_000_000]),  # a 1 MB string
        json.dumps([f"fact {i}." for i in range(300)]),
        json.dumps(["w " * 300, "A fine proposition."]),
    ):
        stats.add(resolve_output(raw, "The passage.", "passage"))
    d = stats.as_dict()
    assert d["rejected"] == {"too_long": 2, "too_many": 1} and d["rejected_total"] == 3
    assert d["too_long_items"] == 1 and d["fallbacks"] == {"passage": 3}


# ---- 4. bad bytes and types -------------------------------------------------------------------
def _bad_byte_passages(tmp_path: Path) -> Path:
    lines = (DEMO / "passages.jsonl").read_bytes().splitlines(keepends=True)[:8]
    lines[4] = lines[4].replace(b"the", b"th\xe9", 1)
    path = tmp_path / "passages.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def test_non_utf8_byte_is_located_and_skippable(tmp_path):
    path = _bad_byte_passages(tmp_path)
    offset = path.read_bytes().index(b"\xe9")
    with pytest.raises(DataError) as e:  # before: UnicodeDecodeError, no file or line
        read_passages(path)
    assert str(e.value).startswith(f"{path}:5: ") and f"byte offset {offset}" in str(e.value)
    skips = Skips("skip")
    assert len(read_passages(path, skips)) == 7 and skips.total == 1


def test_wrong_types_name_the_type_found(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [{"id": "a", "text": 5}, {"id": "b", "text": ["x"]}, {"id": 7, "text": "t"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    skips = Skips("skip")
    read_passages(path, skips)
    msgs = " | ".join(skips.examples)
    assert "expected a string, got int" in msgs and "expected a string, got list" in msgs
    assert ":3: field 'id': expected a string, got int" in msgs


def test_bad_bytes_in_dpr_tsv_questions_are_skippable(tmp_path):
    from densex.data.questions import load_questions

    path = tmp_path / "q.tsv"
    path.write_bytes(b"who? \t['a']\nwh\xe9re?\t['b']\nwhen?\t['c']\n")
    skips = Skips("skip")
    rows = load_questions(path, "dpr-tsv", on_error="skip", skips=skips)
    assert [r["question"] for r in rows] == ["who?", "when?"] and skips.total == 1
    offset = path.read_bytes().index(b"\xe9")
    assert f":2: invalid UTF-8 byte 0xe9 at byte offset {offset}" in skips.examples[0]


def test_numbered_jsonl_keeps_line_numbers_after_a_bad_byte(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n\n{"a": 3}\n')
    errors: list = []
    assert [ln for ln, _ in numbered_jsonl(path, errors.append)] == [1, 4]
    assert errors[0].line == 2


# ---- 5. secrets, torch.load -------------------------------------------------------------------
def test_redaction_of_urls_keys_and_env_secrets(monkeypatch):
    from densex.utils.secrets import redact_config, redact_text

    monkeypatch.setenv("SOME_SERVICE_API_KEY", "k3y-value-0123456789")
    text = (
        "propositionizer.base_url=http://user:hunter2pass@127.0.0.1:8000/v1 "
        "api_key: abc123 api_key_env: OPENAI_API_KEY echo k3y-value-0123456789 max_tokens: 5"
    )
    out = redact_text(text)
    for secret in ("hunter2pass", "abc123", "k3y-value-0123456789"):
        assert secret not in out
    assert "api_key_env: OPENAI_API_KEY" in out and "max_tokens: 5" in out
    assert redact_config({"p": {"api_key": "x", "base_url": "https://u:p@h/v1"}}) == {
        "p": {"api_key": "***", "base_url": "https://***@h/v1"}
    }


def test_no_unsafe_torch_load():
    from densex.pipelines.train import checkpoints as train_checkpoints
    from densex.pipelines.train import run as train
    from densex.pipelines.train import setup as train_setup

    for module in (train, train_checkpoints, train_setup):
        assert "weights_only=False" not in inspect.getsource(module)


# ---- 1. resume points -------------------------------------------------------------------------
def _train_cfg(repo_root: Path, run_dir: Path, *overrides: str):
    return compose_config("train", f"paths.output_dir={run_dir}", "model=tiny", *overrides)


def test_ckpt_path_last_finds_the_newest_or_says_there_is_none(repo_root, tmp_path):
    from densex.pipelines.train.checkpoints import resolve_ckpt

    cfg = _train_cfg(repo_root, tmp_path)
    with pytest.raises(FileNotFoundError, match="there is no checkpoint"):
        resolve_ckpt("last", cfg)
    assert resolve_ckpt("auto", cfg) is None  # a clean start, when asked for
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    import torch

    for i, name in enumerate(("epoch_000.ckpt", "last.ckpt", "last-step.ckpt", "cut.ckpt")):
        torch.save({"global_step": 8 + i, "state_dict": {"w": torch.ones(1000)}}, ckpts / name)
        os.utime(ckpts / name, ns=(10**18 + i, 10**18 + i))
    cut = ckpts / "cut.ckpt"  # the newest, but cut short by a kill while it was copied in
    with cut.open("r+b") as f:
        f.truncate(cut.stat().st_size // 2)
    os.utime(cut, ns=(10**18 + 9, 10**18 + 9))
    assert resolve_ckpt("last", cfg) == str(ckpts / "last-step.ckpt")  # mid-epoch, newest
    assert cfg.callbacks.step_checkpoint.every_n_train_steps > 0


def test_resumable_loader_skips_the_batches_done():
    import torch

    from densex.utils.resume import ResumableDataLoader

    done = {"n": (0, 3)}
    loader = ResumableDataLoader(list(range(10)), batch_size=2, progress=lambda: done["n"])
    state = loader.state_dict()
    assert (state["epoch"], state["batches_done"]) == (0, 3)
    before = torch.get_rng_state()
    iter(loader)  # the workers' base seed comes from the loader's generator, not the global one
    assert torch.equal(torch.get_rng_state(), before)
    loader.load_state_dict({"epoch": 0, "batches_done": 3})
    assert [b.tolist() for b in loader] == [[6, 7], [8, 9]]
    assert len(list(loader)) == 5  # only the first epoch after a restore skips
    loader.load_state_dict({"epoch": 0, "batches_done": 5})  # at the epoch's end: skip nothing
    assert len(list(loader)) == 5


def test_resumed_loader_skips_in_the_checkpoints_epoch_order():
    """Lightning creates a resumed run's first iterator before it calls `set_epoch`: the skip
    must happen in the order of the checkpoint's epoch, not the fresh sampler's epoch 0 (it
    did: a run resumed in epoch 1 trained on some of epoch 0's batches)."""
    from torch.utils.data import DistributedSampler

    from densex.utils.resume import ResumableDataLoader

    def loader() -> ResumableDataLoader:
        sampler = DistributedSampler(range(40), num_replicas=1, rank=0, shuffle=True, seed=7)
        return ResumableDataLoader(list(range(40)), batch_size=4, sampler=sampler)

    ref = loader()
    ref.sampler.set_epoch(1)
    epoch1 = [b.tolist() for b in ref]
    ref.sampler.set_epoch(0)
    assert epoch1 != [b.tolist() for b in ref]  # the epochs' orders differ
    resumed = loader()
    resumed.load_state_dict({"epoch": 1, "batches_done": 3})
    it = iter(resumed)  # Lightning's order: iterator first (FitLoop.setup_data) ...
    resumed.sampler.set_epoch(1)  # ... then set_epoch (FitLoop.on_advance_start)
    assert [b.tolist() for b in it] == epoch1[3:]


def test_step_checkpoints_wait_for_the_end_of_an_accumulation_window(monkeypatch):
    """A time-based save due inside a gradient-accumulation window (whose gradients no
    checkpoint holds) is deferred to the window's last batch (or the epoch's)."""
    from types import SimpleNamespace

    from pytorch_lightning.callbacks import ModelCheckpoint

    from densex.utils.resume import StepCheckpoint

    saved = []
    monkeypatch.setattr(ModelCheckpoint, "on_train_batch_end", lambda self, t, *a: saved.append(t))
    cb = StepCheckpoint(dirpath="unused", train_time_interval=None, every_n_train_steps=1)

    def trainer(done: int, accumulate: int = 4, n: int = 10) -> SimpleNamespace:
        progress = SimpleNamespace(current=SimpleNamespace(processed=done))
        loop = SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress))
        return SimpleNamespace(
            fit_loop=loop, current_epoch=0, accumulate_grad_batches=accumulate,
            num_training_batches=n,
        )  # fmt: skip

    for done in range(1, 11):
        cb.on_train_batch_end(trainer(done), None, None, None, done - 1)
    assert [t.fit_loop.epoch_loop.batch_progress.current.processed for t in saved] == [4, 8, 10]
    saved.clear()
    cb.on_train_batch_end(trainer(3, accumulate=1), None, None, None, 2)
    assert len(saved) == 1


def test_fresh_training_starts_its_random_stream_from_the_seed():
    """`RNGState(seed)`: a fresh run reseeds at train start, whatever the setup drew; a
    resumed one gets the checkpoint's generators back exactly."""
    import random as pyrandom

    import numpy as np
    import torch

    from densex.utils.resume import RNGState

    def draws() -> tuple:
        return torch.rand(3).tolist(), np.random.rand(2).tolist(), pyrandom.random()

    fresh = []
    for setup_draws in (0, 5):
        torch.rand(setup_draws)  # e.g. a tiny model built in this process, or found cached
        RNGState(seed=42).on_train_start(None, None)
        fresh.append(draws())
    assert fresh[0] == fresh[1]
    saved = RNGState(seed=42)
    state = saved.state_dict()
    expected = draws()
    torch.rand(11)
    resumed = RNGState(seed=42)
    resumed.load_state_dict(state)
    resumed.on_train_start(None, None)  # restores, does not reseed
    assert draws() == expected


def test_building_a_tiny_t5_leaves_the_global_generator_alone(tmp_path):
    """Building the tiny model used to `torch.manual_seed(0)` the global generator, so a run
    that built it and one that found it cached trained with different dropout masks."""
    import torch

    from densex.utils.tiny_t5 import build_tiny_t5

    torch.manual_seed(123)
    before = torch.get_rng_state()
    build_tiny_t5(tmp_path / "a")
    assert torch.equal(torch.get_rng_state(), before)
    torch.rand(7)  # another global state: the weights come from the build seed alone
    build_tiny_t5(tmp_path / "b")
    a = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "b" / "model.safetensors").read_bytes()

"""Propositionizer inference through Lightning predict: N passages in -> N rows out, parse
counts in the manifest, resumable shards, a tiny T5 taught to answer in JSON, bad input."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from densex.pipelines.edge import trainer_args
from densex.propositionizer import fingerprint, model_backend
from densex.propositionizer.generator import PropositionGenerator, PropositionShardWriter
from densex.propositionizer.output import manifest_path, passage_source
from densex.propositionizer.resolve import SentenceSplitter
from densex.utils.generation import hit_max_new_tokens
from densex.utils.io import DataError
from helpers.config import compose_config
from helpers.run_if import RunIf
from helpers.typed import generate_propositions

TRAINER = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _first_passages(squad_open: Path, tmp_path: Path, n: int) -> tuple[Path, list[dict]]:
    with open(squad_open / "passages.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in islice(f, n)]
    path = tmp_path / "passages.jsonl"
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    return path, rows


def _cfg(model: Path, **kw) -> dict:
    return {
        "type": "model",
        "model": str(model),
        "max_new_tokens": 24,
        "batch_size": 4,
        "shard_size": 3,
        "fallback": "sentences",
        "spacy_model": "",
        **kw,
    }


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_random_tiny_t5_every_passage_out_and_fallbacks_counted(tiny_t5, squad_open, tmp_path):
    passages_path, passages = _first_passages(squad_open, tmp_path, 7)
    out = generate_propositions(
        passages_path, _cfg(tiny_t5), tmp_path / "out" / "propositions.jsonl", TRAINER
    )
    rows = _read(out)
    assert [r["id"] for r in rows] == [p["id"] for p in passages]  # N in = N out, in order
    m = json.loads(manifest_path(out).read_text())
    assert m["passages"] == 7 and m["type"] == "model" and m["model"] == str(tiny_t5)
    assert m["parsed_strict"] + m["repaired"] + m["unparseable"] == 7
    # a random model writes no JSON: every passage falls back to its spaCy sentences
    assert (
        m["fallback_total"] == sum(m["fallbacks"].values()) == sum(m["fallback_reasons"].values())
    )
    assert m["fallbacks"] == {"sentences": 7}
    split = SentenceSplitter("")
    for row, p in zip(rows, passages):
        assert row["propositions"] == split(p["text"])
    assert m["propositions"] == sum(len(r["propositions"]) for r in rows)
    assert m["shards"] == {"dir": m["shards"]["dir"], "total": 3, "generated": 3, "reused": 0}
    assert m["settings"]["max_new_tokens"] == 24 and m["settings"]["decoding"] == "greedy"


def test_interrupted_run_resumes_at_the_missing_shards(tiny_t5, squad_open, tmp_path, monkeypatch):
    passages_path, _ = _first_passages(squad_open, tmp_path, 8)  # shards of 3: 3 shards
    reference = generate_propositions(
        passages_path, _cfg(tiny_t5), tmp_path / "ref" / "p.jsonl", TRAINER
    )

    out = tmp_path / "run" / "p.jsonl"
    real_write = PropositionShardWriter.write_on_batch_end

    def write_then_crash(self, *args, **kwargs):
        real_write(self, *args, **kwargs)
        raise RuntimeError("simulated preemption after one shard")

    monkeypatch.setattr(PropositionShardWriter, "write_on_batch_end", write_then_crash)
    with pytest.raises(RuntimeError, match="preemption"):
        generate_propositions(passages_path, _cfg(tiny_t5), out, TRAINER)
    assert not out.exists()
    (shard0,) = (out.parent / "shards").glob("*/shard-*.jsonl")
    assert shard0.name == "shard-00000.jsonl"
    mtime = shard0.stat().st_mtime_ns
    monkeypatch.setattr(PropositionShardWriter, "write_on_batch_end", real_write)

    generated: list[list[str]] = []
    real_generate = PropositionGenerator.generate

    def counting_generate(self, sources, *unit):
        generated.append(list(sources))
        return real_generate(self, sources, *unit)

    monkeypatch.setattr(PropositionGenerator, "generate", counting_generate)
    generate_propositions(passages_path, _cfg(tiny_t5, batch_size=2), out, TRAINER)
    assert len(generated) == 2 and sum(map(len, generated)) == 5  # shards 1 and 2 only
    assert shard0.stat().st_mtime_ns == mtime  # the finished shard was not rewritten
    assert out.read_bytes() == reference.read_bytes()
    m = json.loads(manifest_path(out).read_text())
    assert m["shards"]["generated"] == 2 and m["shards"]["reused"] == 1

    generated.clear()  # a third run generates nothing at all
    generate_propositions(passages_path, _cfg(tiny_t5), out, TRAINER)
    assert generated == [] and out.read_bytes() == reference.read_bytes()

    # a different generation setting is a different shard set, never a stale reuse
    generate_propositions(passages_path, _cfg(tiny_t5, max_new_tokens=8), out, TRAINER)
    assert len(generated) == 3


def _teach_json(sources: list[str], targets: list[str], out_dir: Path) -> Path:
    """A tiny T5 (vocabulary fitted to these texts, no dropout) overfit on (source, target)
    pairs, so that its greedy outputs are known exactly; about a second on one CPU thread."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from densex.utils.tiny_t5 import build_tiny_t5

    build_tiny_t5(out_dir, texts=sources + targets)
    tok = AutoTokenizer.from_pretrained(out_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(out_dir, dropout_rate=0.0)
    enc = tok(sources, return_tensors="pt", padding=True)
    labels = tok(targets, return_tensors="pt", padding=True).input_ids
    labels[labels == tok.pad_token_id] = -100
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = model(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if loss.item() < 0.005:
            break
    model.eval()
    out = model.generate(**enc, max_new_tokens=100, do_sample=False)
    assert tok.batch_decode(out, skip_special_tokens=True) == targets, (
        "the tiny T5 did not memorise"
    )
    model.save_pretrained(out_dir)
    return out_dir


def test_model_taught_to_write_json(squad_open, tmp_path):
    """Real generation yields each parse path: strict JSON, a label to strip, an answer with
    no list (fallback), and a list cut by max_new_tokens (complete strings kept). Inputs are
    the first 12 words of real passages; targets are their teacher propositions."""
    with open(squad_open / "passages.jsonl", encoding="utf-8") as f:
        passages = [json.loads(line) for line in islice(f, 40)]
    with open(squad_open / "propositions.jsonl", encoding="utf-8") as f:
        teacher = [json.loads(line)["propositions"] for line in islice(f, 40)]
    pick = sorted(range(40), key=lambda i: len(min(teacher[i], key=len)))[:4]
    passages = [{**passages[i], "text": " ".join(passages[i]["text"].split()[:12])} for i in pick]
    short = [min(teacher[i], key=len) for i in pick]
    passages_path = tmp_path / "passages.jsonl"
    passages_path.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    targets = [
        json.dumps([short[0]]),
        "Output: " + json.dumps([short[1]]),
        "I do not know.",
        json.dumps([short[3], "The embargo ended in March 1974.", "Oil prices rose."]),
    ]
    model = _teach_json([passage_source(p) for p in passages], targets, tmp_path / "taught")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    n_tokens = [len(tok(t).input_ids) for t in targets]  # includes </s>
    limit = max(n_tokens[:3]) + 3
    assert len(tok(json.dumps([short[3]])[:-1] + ', "').input_ids) <= limit < n_tokens[3] - 5

    out = generate_propositions(
        passages_path,
        _cfg(model, max_new_tokens=limit, shard_size=2),
        tmp_path / "o" / "p.jsonl",
        TRAINER,
    )
    rows = _read(out)
    assert rows[0]["propositions"] == [short[0]]
    assert rows[1]["propositions"] == [short[1]]
    assert rows[2]["propositions"] == SentenceSplitter("")(passages[2]["text"])
    assert rows[3]["propositions"] == [short[3]]
    m = json.loads(manifest_path(out).read_text())
    assert (m["parsed_strict"], m["repaired"], m["unparseable"]) == (1, 2, 1)
    assert m["repairs"] == {"prefix": 1, "truncated": 1}
    assert m["fallbacks"] == {"sentences": 1} and m["fallback_reasons"] == {"unparseable": 1}
    assert m["hit_max_new_tokens"] == 1

    # the same outputs with `fallback: passage` re-parse the kept shards; nothing regenerates
    out2 = generate_propositions(
        passages_path,
        _cfg(model, max_new_tokens=limit, shard_size=2, fallback="passage"),
        out,
        TRAINER,
    )
    m2 = json.loads(manifest_path(out2).read_text())
    assert _read(out2)[2]["propositions"] == [passages[2]["text"]]
    assert m2["fallbacks"] == {"passage": 1} and m2["shards"]["generated"] == 0


def test_bad_passages_fail_with_file_line_field(tiny_t5, tmp_path):
    good = {"id": "a", "title": "T", "section": "", "text": "A is B."}
    cases = [
        ([good, {"id": "b", "title": "T"}], 2, "text"),
        ([good, {"id": "b", "title": "T", "text": 3}], 2, "text"),
        ([good, dict(good)], 2, "id"),
    ]
    for rows, line, field in cases:
        path = tmp_path / "bad.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(DataError) as e:
            generate_propositions(path, _cfg(tiny_t5), tmp_path / "o" / "p.jsonl", TRAINER)
        assert (e.value.path, e.value.line, e.value.field) == (str(path), line, field)
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps(good) + "\n")
    with pytest.raises(ValueError, match="type='file'"):
        generate_propositions(path, {"type": "file"}, tmp_path / "o" / "p.jsonl")
    with pytest.raises(ValueError, match="fallback"):
        generate_propositions(path, _cfg(tiny_t5, fallback="drop"), tmp_path / "o" / "p.jsonl")


def test_propositionizer_configs_compose(repo_root, tiny_t5, tmp_path):
    large = compose_config("propositionizer/flan-t5-large").propositionizer
    model = compose_config(
        "propositionizer/model",
        f"propositionizer.model={tiny_t5}",
        "propositionizer.max_new_tokens=8",
    ).propositionizer
    teacher = compose_config("propositionizer/teacher").propositionizer
    assert large.type == "model" and large.model == "chentong00/propositionizer-wiki-flan-t5-large"
    assert large.max_new_tokens == 512 and large.num_beams == 1 and large.fallback == "sentences"
    assert teacher.type == "teacher" and teacher.api_key_env == "OPENAI_API_KEY"
    assert teacher.temperature == 0.0 and set(teacher.prices) == {
        "prompt_per_1m",
        "completion_per_1m",
    }
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps({"id": "a", "title": "T", "section": "", "text": "A is B. C is D."}) + "\n"
    )
    # the project's trainer config (Hydra `_target_`), as index.py passes it: its plain values
    trainer = OmegaConf.load(repo_root / "conf" / "trainer" / "default.yaml")
    trainer.default_root_dir, trainer.accelerator, trainer.enable_progress_bar = (
        str(tmp_path),
        "cpu",
        False,
    )
    args = trainer_args(OmegaConf.create({"trainer": trainer}))
    assert args["_target_"] == "pytorch_lightning.Trainer"
    out = generate_propositions(path, model, tmp_path / "o" / "p.jsonl", args)
    assert [r["id"] for r in _read(out)] == ["a"]


@pytest.mark.slow
def test_ddp_spawn_two_processes_match_one(tiny_t5, squad_open, tmp_path):
    """Two CPU processes (ddp_spawn, gloo) split the shards and give the same file as one."""
    passages_path, _ = _first_passages(squad_open, tmp_path, 10)
    one = generate_propositions(passages_path, _cfg(tiny_t5), tmp_path / "one" / "p.jsonl", TRAINER)
    ddp = {**TRAINER, "devices": 2, "strategy": "ddp_spawn"}
    two = generate_propositions(passages_path, _cfg(tiny_t5), tmp_path / "two" / "p.jsonl", ddp)
    assert two.read_bytes() == one.read_bytes()
    assert json.loads(manifest_path(two).read_text())["shards"]["generated"] == 4


def test_more_processes_than_shards(tiny_t5, squad_open, tmp_path, spawn_from_forkserver):
    """2 processes, 1 shard: the idle rank generates one probe passage (Lightning wants a batch
    on every rank) that it never writes; the file equals one process's. (ddp_spawn's workers
    started by the forkserver of `spawn_from_forkserver`; the slow test above spawns its own.)"""
    passages_path, _ = _first_passages(squad_open, tmp_path, 3)
    one = generate_propositions(passages_path, _cfg(tiny_t5), tmp_path / "one" / "p.jsonl", TRAINER)
    ddp = {**TRAINER, "devices": 2, "strategy": "ddp_spawn"}
    two = generate_propositions(passages_path, _cfg(tiny_t5), tmp_path / "two" / "p.jsonl", ddp)
    assert two.read_bytes() == one.read_bytes()
    shards = json.loads(manifest_path(two).read_text())["shards"]
    assert (shards["total"], shards["generated"]) == (1, 1)


def test_passages_are_read_by_the_corpus_reader(tiny_t5, tmp_path, monkeypatch):
    """generate reads passages with `densex.corpus.readers.read_passages`: a missing title is
    "" (the source format has one), blank text is a located error, `on_error: skip` drops it."""
    rows = [
        {"id": "a", "text": "A is B."},  # no title, no section
        {"id": "b", "title": "T", "section": "S", "text": "   "},
        {"id": "c", "title": "T", "text": "C is D."},
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as e:
        generate_propositions(path, _cfg(tiny_t5), tmp_path / "o" / "p.jsonl", TRAINER)
    assert (e.value.path, e.value.line, e.value.field) == (str(path), 2, "text")

    built = []
    original = model_backend.predict_trainer

    def spy(*args, **kwargs):
        built.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(model_backend, "predict_trainer", spy)
    out = generate_propositions(
        path, _cfg(tiny_t5, on_error="skip"), tmp_path / "o" / "p.jsonl", TRAINER
    )
    assert [r["id"] for r in _read(out)] == ["a", "c"]
    assert len(built) == 1  # the shared predict-Trainer builder (densex.utils.trainer)
    skipped = json.loads(manifest_path(out).read_text())["skipped"]  # never only in the log
    assert skipped["total"] == 1 and skipped["by_field"] == {"text": 1}
    assert len(skipped["examples"]) == 1 and f"{path}:2" in skipped["examples"][0]


def _spy_generate(monkeypatch) -> list[dict]:
    """Record, at each `generate` call, the weights' dtype and whether autocast is on."""
    seen: list[dict] = []
    real = PropositionGenerator.generate

    def spy(self, sources, *unit):
        seen.append(
            {
                "dtype": next(self.model.parameters()).dtype,
                "autocast": torch.is_autocast_enabled("cpu"),
            }
        )
        return real(self, sources, *unit)

    monkeypatch.setattr(PropositionGenerator, "generate", spy)
    return seen


def test_propositionizer_dtype_decides_not_the_trainer_precision(
    tiny_t5, squad_open, tmp_path, monkeypatch
):
    """`trainer.precision: bf16-mixed` (what `auto` gives on a bf16 GPU) must not run a
    `dtype: float32` propositionizer under bf16 autocast; the dtype used is in key + manifest.
    The CPU is taken to lack native bf16 (`auto` is then float32, as on an Intel Xeon without
    AMX); `test_effective_dtype_follows_the_trainer_accelerator` covers CPUs that have it."""
    monkeypatch.setattr(fingerprint, "cpu_has_bf16", lambda: False)
    passages_path, _ = _first_passages(squad_open, tmp_path, 3)
    seen = _spy_generate(monkeypatch)
    built = []
    original = model_backend.predict_trainer

    def spy_trainer(*args, **kwargs):
        built.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(model_backend, "predict_trainer", spy_trainer)
    bf16_trainer = {**TRAINER, "precision": "bf16-mixed"}
    out = generate_propositions(
        passages_path, _cfg(tiny_t5, dtype="float32"), tmp_path / "a" / "p.jsonl", bf16_trainer
    )
    assert seen == [{"dtype": torch.float32, "autocast": False}]
    assert built[0]["precision"] == "32-true"
    m = json.loads(manifest_path(out).read_text())
    assert m["settings"]["dtype"] == "float32" and m["settings"]["dtype_requested"] == "float32"

    # auto on a CPU trainer is float32: the same shards as an explicit float32
    seen.clear()
    out = generate_propositions(
        passages_path, _cfg(tiny_t5, dtype="auto"), tmp_path / "a" / "p.jsonl", bf16_trainer
    )
    m = json.loads(manifest_path(out).read_text())
    assert seen == [] and m["shards"]["generated"] == 0
    assert m["settings"]["dtype"] == "float32" and m["settings"]["dtype_requested"] == "auto"

    # an explicit bfloat16: the weights are bf16 (no autocast), new shards, recorded
    out = generate_propositions(
        passages_path, _cfg(tiny_t5, dtype="bf16"), tmp_path / "a" / "p.jsonl", TRAINER
    )
    assert seen == [{"dtype": torch.bfloat16, "autocast": False}]
    m = json.loads(manifest_path(out).read_text())
    assert m["settings"]["dtype"] == "bfloat16" and m["shards"]["generated"] == 1
    assert len(list((tmp_path / "a" / "shards").iterdir())) == 2


@pytest.mark.parametrize("native_bf16", [False, True])
def test_effective_dtype_follows_the_trainer_accelerator(native_bf16, monkeypatch):
    """`auto` on a CPU: bfloat16 where the CPU multiplies bf16 natively (AMX, AVX512-BF16),
    float32 elsewhere; an explicit dtype is kept on any CPU."""
    monkeypatch.setattr(fingerprint, "cpu_has_bf16", lambda: native_bf16)
    cpu_auto = "bfloat16" if native_bf16 else "float32"
    assert fingerprint.effective_dtype("auto", {"accelerator": "cpu"}) == cpu_auto
    assert fingerprint.effective_dtype("fp16", {"accelerator": "cpu"}) == "float16"
    assert fingerprint.effective_dtype("float32", None) == "float32"
    gpu = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert fingerprint.effective_dtype("auto", {"accelerator": "gpu"}) == (
        "bfloat16" if gpu else cpu_auto
    )
    with pytest.raises(ValueError, match="dtype must be"):
        fingerprint.effective_dtype("int8", None)


def _fake_hub_snapshot(cache: Path, repo_id: str, model_dir: Path, commit: str) -> None:
    """Lay `model_dir` out as the hub cache does: snapshots/<commit>/ + refs/main."""
    import shutil

    repo = cache / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(model_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


def test_a_hub_id_is_keyed_by_its_resolved_commit(tiny_t5, squad_open, tmp_path, monkeypatch):
    """A hub id that moves to a new commit must not reuse the old commit's shards."""
    import huggingface_hub.constants as hf_constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    c1, c2 = "1" * 40, "2" * 40
    _fake_hub_snapshot(cache, "densex-test/tiny-t5", tiny_t5, c1)
    assert fingerprint.hub_commit("densex-test/tiny-t5") == c1
    assert fingerprint.hub_commit("densex-test/not-cached") is None  # offline, unknown: id only
    assert fingerprint.model_fingerprint("densex-test/not-cached") == {
        "hub_id": "densex-test/not-cached",
        "commit": None,
    }

    passages_path, _ = _first_passages(squad_open, tmp_path, 3)
    cfg = _cfg("densex-test/tiny-t5")
    out = generate_propositions(passages_path, cfg, tmp_path / "o" / "p.jsonl", TRAINER)
    m = json.loads(manifest_path(out).read_text())
    assert m["model"] == "densex-test/tiny-t5" and m["model_commit"] == c1
    generate_propositions(passages_path, cfg, out, TRAINER)
    assert json.loads(manifest_path(out).read_text())["shards"]["generated"] == 0

    _fake_hub_snapshot(cache, "densex-test/tiny-t5", tiny_t5, c2)  # a new upload
    generate_propositions(passages_path, cfg, out, TRAINER)
    m = json.loads(manifest_path(out).read_text())
    assert m["model_commit"] == c2 and m["shards"]["generated"] == 1


def test_hit_max_new_tokens_whatever_the_decoder_start_token():
    """Column 0 of a seq2seq output is the decoder start token (T5: pad 0; BART: eos 2); only
    the generated tokens decide whether a row ran into max_new_tokens without an eos."""
    eos = {2}
    out = torch.tensor(
        [
            [2, 5, 6, 7, 8],  # BART-like start = eos; 4 generated, no eos: cut
            [2, 5, 2, 1, 1],  # ended with eos, then padding
            [2, 5, 6, 7, 2],  # eos exactly at the limit: not cut
        ]
    )
    assert hit_max_new_tokens(out, eos, 4) == [True, False, False]
    assert hit_max_new_tokens(out, eos, 5) == [False, False, False]  # never reached
    t5 = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 1, 0, 0]])  # T5: start = pad, eos = 1
    assert hit_max_new_tokens(t5, {1}, 4) == [True, False]


def test_cut_flags_with_eos_as_decoder_start(tiny_t5, squad_open, tmp_path):
    """A real model whose decoder starts with eos (as BART does): the flags still match what
    generation did, checked one passage at a time."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_t5)
    tok = AutoTokenizer.from_pretrained(tiny_t5)
    model.config.decoder_start_token_id = tok.eos_token_id
    model.generation_config.decoder_start_token_id = tok.eos_token_id
    bart_like = tmp_path / "bart_like"
    model.save_pretrained(bart_like)
    tok.save_pretrained(bart_like)

    _, passages = _first_passages(squad_open, tmp_path, 6)
    sources = [passage_source(p) for p in passages]
    module = PropositionGenerator(str(bart_like), batch_size=4, max_new_tokens=6)
    _, cut = module.generate(sources)
    expected = []
    for s in sources:
        one = module.model.generate(**tok(s, return_tensors="pt"), max_new_tokens=6)[0, 1:]
        expected.append(len(one) == 6 and tok.eos_token_id not in one.tolist())
    assert any(expected)  # the random model runs into the limit for some passages
    assert cut == expected


@RunIf(min_gpus=1, bf16=True)
def test_auto_dtype_is_bfloat16_on_a_bf16_gpu(tiny_t5, squad_open, tmp_path):
    """The GPU path `dtype: auto` takes: the weights load in bfloat16, recorded as such."""
    passages_path, _ = _first_passages(squad_open, tmp_path, 3)
    gpu = {**TRAINER, "accelerator": "gpu", "devices": 1}
    out = generate_propositions(passages_path, _cfg(tiny_t5), tmp_path / "g" / "p.jsonl", gpu)
    m = json.loads(manifest_path(out).read_text())
    assert m["settings"]["dtype"] == "bfloat16" and m["settings"]["dtype_requested"] == "auto"
    assert m["passages"] == 3 and m["shards"]["generated"] == 1


def test_a_shard_logs_its_progress_between_batches(
    tiny_t5, squad_open, tmp_path, monkeypatch, caplog
):
    # a CPU shard of 256 passages takes minutes: a log (no terminal) hears from it meanwhile
    monkeypatch.setenv("DENSEX_PROGRESS", "log")
    monkeypatch.setenv("DENSEX_PROGRESS_S", "0")
    _, rows = _first_passages(squad_open, tmp_path, 5)
    sources = [passage_source(r) for r in rows]
    module = PropositionGenerator(str(tiny_t5), batch_size=2, max_new_tokens=4)
    with caplog.at_level("INFO", logger="densex.progress"):
        texts, _ = module.generate(sources)
    lines = [r.getMessage() for r in caplog.records if r.name == "densex.progress"]
    assert len(texts) == 5
    assert "propositions: 2/5 passages (40%)" in lines[0], lines
    assert "propositions: 4/5 passages (80%)" in lines[1], lines
    assert lines[-1].startswith("propositions: 5 passages in "), lines


def test_per_sentence_gives_each_sentence_its_own_input(tiny_t5, squad_open, tmp_path, monkeypatch):
    """`per_sentence`: the model reads each sentence alone (title and section kept), every
    sentence's output is parsed and falls back on its own, and a passage's row is its
    sentences' propositions in order; the report still knows each passage's parse outcome."""
    from densex.corpus.segment import load_sentencizer, split_sentences
    from densex.propositionizer.quality import parse_outcomes

    passages_path, passages = _first_passages(squad_open, tmp_path, 4)
    seen: list[str] = []

    def fake(self, sources, unit="passages"):  # upper-cased, or no list if it has a year
        seen.extend(sources)
        texts = [s.split("Content: ", 1)[1] for s in sources]
        raws = ["no list" if "1973" in t else json.dumps([t.upper()]) for t in texts]
        return raws, [False] * len(sources)

    monkeypatch.setattr(PropositionGenerator, "generate", fake)
    out = generate_propositions(
        passages_path, _cfg(tiny_t5, per_sentence=True), tmp_path / "o" / "p.jsonl", TRAINER
    )
    nlp = load_sentencizer("")
    units = [{**p, "text": s} for p in passages for s in split_sentences(p["text"], nlp)]
    assert sorted(seen) == sorted(passage_source(u) for u in units) and len(units) > 4
    rows = _read(out)
    assert [r["id"] for r in rows] == [p["id"] for p in passages]
    for row, p in zip(rows, passages):
        sentences = split_sentences(p["text"], nlp)
        assert row["propositions"] == [s if "1973" in s else s.upper() for s in sentences]
    m = json.loads(manifest_path(out).read_text())
    fell_back = sum("1973" in u["text"] for u in units)
    assert 0 < fell_back < len(units)
    assert (m["passages"], m["outputs"], m["unparseable"]) == (4, len(units), fell_back)
    assert m["settings"]["per_sentence"] is True and m["shards"]["total"] == -(-len(units) // 3)
    outcomes = parse_outcomes(out, {r["id"]: r["propositions"] for r in rows})
    for p in passages:
        has_year = "1973" in p["text"]
        assert outcomes[p["id"]]["parse"] == ("fallback" if has_year else "strict")

    # per passage, the same model reads whole passages: other shards, nothing reused
    seen.clear()
    whole = generate_propositions(passages_path, _cfg(tiny_t5), tmp_path / "w" / "p.jsonl", TRAINER)
    assert sorted(seen) == sorted(passage_source(p) for p in passages)
    assert json.loads(manifest_path(whole).read_text())["shards"]["dir"] != m["shards"]["dir"]

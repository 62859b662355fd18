"""Late chunking (`retriever.late_chunking`, `densex.retrieval.late`) on real passages with the
real all-MiniLM-L6-v2: densex's late vectors equal an independent transformers/numpy
reference; long contexts run in windows that take every token once; generated propositions
are refused by name (preflight and encoder); the late setting keys embeddings apart while the
keys of every encoding without it stay as they were."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from densex.pipelines.preflight.hub import PreflightError
from densex.pipelines.preflight.models import check_late_units
from densex.retrieval.build import embeddings_dir
from densex.retrieval.encode_lightning import EmbeddingShardWriter
from densex.retrieval.encoders import load_encoder
from densex.retrieval.late import LateContext, find_spans, tokenize_late
from densex.retrieval.spec import RetrieverSpec
from densex.utils.io import DataError
from helpers.config import compose_config
from helpers.typed import build_units, encode_units_to_dir

CPU = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}
# minilm as conf/retriever/minilm.yaml says it
MINILM = dict(name="minilm", backend="sentence-transformers", query_model="packaged:minilm",
              pooling="st", similarity="cos")  # fmt: skip
STEP = 220  # ten passages from across the 2,203 of squad-open: every 220th


@pytest.fixture(scope="module")
def ten(squad_open: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Ten real passages (every `STEP`th), their teacher propositions, and their units built by
    densex (passage, sentence: spaCy; proposition: the teacher's file)."""
    out = tmp_path_factory.mktemp("late")
    lines = (squad_open / "passages.jsonl").read_text(encoding="utf-8").splitlines()
    passages = [json.loads(x) for x in lines[::STEP][:10]]
    ids = {p["id"] for p in passages}
    with open(squad_open / "propositions.jsonl", encoding="utf-8") as f:
        props = [r for r in map(json.loads, f) if r["id"] in ids]
    (out / "p.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages))
    (out / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in props))
    corpus = {"name": "late10", "passages": str(out / "p.jsonl"),
              "propositions": str(out / "q.jsonl")}  # fmt: skip
    files = build_units(corpus, out / "units")
    return {"passages": passages, "files": files, "out": out}


def _units(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def reference_late_vectors(model_path: str, passages: list[dict], units: list[dict]) -> dict:
    """Independent of densex: token states from transformers' AutoModel on "title text" (as
    minilm formats a passage), each sentence located in its passage with str.index, the tokens
    whose offsets overlap it averaged (no special tokens), L2-normalised (MiniLM's Normalize)."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    out = {}
    for p in passages:
        text, shift = p["title"] + " " + p["text"], len(p["title"]) + 1
        enc = tok(text, return_offsets_mapping=True, return_tensors="pt")
        assert enc["input_ids"].shape[1] <= 256  # one window: the reference needs none
        offsets = enc.pop("offset_mapping")[0].numpy()
        with torch.no_grad():
            states = model(**enc).last_hidden_state[0].numpy().astype(np.float64)
        ids = enc["input_ids"][0].tolist()
        special = np.array(tok.get_special_tokens_mask(ids, already_has_special_tokens=True))
        cursor = 0
        for u in (u for u in units if u["passage_id"] == p["id"]):
            a = p["text"].index(u["text"], cursor)
            cursor = a + len(u["text"])
            a, b = a + shift, cursor + shift
            sel = (special == 0) & (offsets[:, 0] < b) & (offsets[:, 1] > a)
            v = states[sel].mean(0)
            out[u["id"]] = v / np.linalg.norm(v)
    return out


@pytest.fixture(scope="module")
def late_store(ten):
    """The ten passages' sentences encoded with late chunking, in shards of 16 units (passages
    straddle shards)."""
    spec = {**MINILM, "late_chunking": True}
    return encode_units_to_dir(
        ten["files"]["sentence"], spec, ten["out"] / "late", CPU, shard_size=16
    )


def test_late_vectors_equal_an_independent_reference(ten, late_store, minilm_path, tmp_path):
    units_path, store = ten["files"]["sentence"], late_store
    units = _units(units_path)
    assert len(units) > 30 and store.ids == [u["id"] for u in units]
    ref = reference_late_vectors(minilm_path, ten["passages"], units)
    late = np.asarray(store.embeddings, dtype=np.float64)
    expected = np.stack([ref[u["id"]] for u in units])
    np.testing.assert_allclose(late, expected, atol=1e-5, rtol=0)
    # and they are not the sentences encoded alone
    alone = encode_units_to_dir(units_path, MINILM, tmp_path / "alone", CPU, shard_size=16)
    cos = np.sum(late * np.asarray(alone.embeddings), axis=1)
    assert cos.max() < 0.999 and cos.mean() > 0.5


def test_the_reference_check_fails_when_spans_are_off_by_one_token(
    ten, minilm_path, tmp_path, monkeypatch
):
    """The reference comparison above can fail: with every unit's token selection moved one
    token to the right (the span mapping broken on purpose), the vectors leave the 1e-5
    tolerance by orders of magnitude."""
    import densex.retrieval.encode_data as encode_data
    from densex.retrieval.late import LATE_INDEX

    real = encode_data.tokenize_late

    def off_by_one(encoder, contexts, overlap):
        features = real(encoder, contexts, overlap)
        features[LATE_INDEX] = features[LATE_INDEX] + torch.tensor([[0], [1]])
        return features

    monkeypatch.setattr(encode_data, "tokenize_late", off_by_one)
    spec = {**MINILM, "late_chunking": True}
    store = encode_units_to_dir(ten["files"]["sentence"], spec, tmp_path / "off", CPU)
    units = _units(ten["files"]["sentence"])
    ref = reference_late_vectors(minilm_path, ten["passages"], units)
    expected = np.stack([ref[u["id"]] for u in units])
    gap = np.abs(np.asarray(store.embeddings, dtype=np.float64) - expected).max()
    assert gap > 1e-3, gap


def test_a_killed_late_encoding_resumes_to_the_same_vectors(
    ten, late_store, tmp_path, monkeypatch
) -> None:
    """Killed after two shards of 8 units, resumed: every unit equals the uninterrupted run
    (in shards of 16: a unit's vector depends on its passage, not on the shard cut)."""
    spec, units_path = {**MINILM, "late_chunking": True}, ten["files"]["sentence"]
    original = EmbeddingShardWriter._write_shard

    def crash(self, shard, emb):
        if self.shards_written == 2:
            raise RuntimeError("simulated crash")
        original(self, shard, emb)

    monkeypatch.setattr(EmbeddingShardWriter, "_write_shard", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        encode_units_to_dir(units_path, spec, tmp_path / "emb", CPU, shard_size=8)
    monkeypatch.setattr(EmbeddingShardWriter, "_write_shard", original)
    store = encode_units_to_dir(units_path, spec, tmp_path / "emb", CPU, shard_size=8)
    assert store.manifest["resumed_shards"] == 2
    assert store.ids == late_store.ids
    np.testing.assert_allclose(store.embeddings, late_store.embeddings, atol=1e-6)


def test_windows_take_every_token_once(ten, minilm_path) -> None:
    """A context longer than max_length (the ten passages joined, 64-token windows sharing 16):
    the tokens selected for a span over the whole text are the text's own tokens, once each, in
    order; each sentence's selection is its own tokens."""
    spec = RetrieverSpec(**{**MINILM, "late_chunking": True, "max_length": 64, "late_overlap": 16})
    enc = load_encoder(spec, "doc")
    text = " ".join(p["text"] for p in ten["passages"])
    whole = LateContext(np.array([0]), text, np.array([[0, len(text)]]))
    feats = tokenize_late(enc, [whole], overlap=16)
    assert feats["input_ids"].shape[0] > 10  # many windows
    flat = feats["input_ids"].reshape(-1)
    picked = flat[feats["late_index"][1]].tolist()
    assert picked == enc.tokenizer(text, add_special_tokens=False)["input_ids"]
    first = ten["passages"][0]["text"]
    sentences = [u["text"] for u in _units(ten["files"]["sentence"])[:3]]
    spans = find_spans(first, sentences)
    feats = tokenize_late(enc, [LateContext(np.arange(3), first, spans)], overlap=16)
    flat = feats["input_ids"].reshape(-1)
    for i, s in enumerate(sentences):
        mine = feats["late_index"][1][feats["late_index"][0] == i]
        assert flat[mine].tolist() == enc.tokenizer(s, add_special_tokens=False)["input_ids"]


def reference_section_vectors(
    model_path: str, passages: list[dict], units: list[dict], max_length: int, overlap: int
) -> dict:
    """Independent of densex: one article's passages joined by spaces after "title ", cut into
    windows of `max_length - 2` tokens (plus [CLS] / [SEP]) starting every `max_length - 2 -
    overlap` tokens; each token's state from the first window that holds it; sentences located
    with str.index, their tokens averaged, L2-normalised."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    title = passages[0]["title"]
    text = title + " " + " ".join(p["text"] for p in passages)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], np.array(enc["offset_mapping"])
    width, states, start = max_length - 2, np.zeros((len(ids), 384)), 0
    filled = np.zeros(len(ids), dtype=bool)
    while True:
        window = [tok.cls_token_id, *ids[start : start + width], tok.sep_token_id]
        with torch.no_grad():
            h = model(input_ids=torch.tensor([window])).last_hidden_state[0, 1:-1].numpy()
        take = ~filled[start : start + len(h)]
        states[start : start + len(h)][take] = h[take]
        filled[start : start + len(h)] = True
        if start + width >= len(ids):
            break
        start += width - overlap
    out, shift = {}, len(title) + 1
    for p in passages:
        cursor = 0
        for u in (u for u in units if u["passage_id"] == p["id"]):
            a = p["text"].index(u["text"], cursor)
            cursor = a + len(u["text"])
            a, b = a + shift, cursor + shift
            sel = (offsets[:, 0] < b) & (offsets[:, 1] > a)
            v = states[sel].mean(0)
            out[u["id"]] = v / np.linalg.norm(v)
        shift += len(p["text"]) + 1
    return out


def test_section_context_runs_in_windows_like_a_reference(squad_open, minilm_path, tmp_path):
    """`late_context=section` over the first 14 passages of one article (one section), in
    128-token windows sharing 32: each sentence pooled from the article's token states."""
    lines = (squad_open / "passages.jsonl").read_text(encoding="utf-8").splitlines()[:14]
    passages = [json.loads(x) for x in lines]
    assert len({p["title"] for p in passages}) == 1
    (tmp_path / "p.jsonl").write_text("".join(x + "\n" for x in lines))
    files = build_units({"name": "art", "passages": str(tmp_path / "p.jsonl")}, tmp_path / "u")
    spec = {**MINILM, "late_chunking": True, "late_context": "section", "max_length": 128,
            "late_overlap": 32}  # fmt: skip
    store = encode_units_to_dir(files["sentence"], spec, tmp_path / "e", CPU, shard_size=16)
    units = _units(files["sentence"])
    ref = reference_section_vectors(minilm_path, passages, units, 128, 32)
    expected = np.stack([ref[u["id"]] for u in units])
    np.testing.assert_allclose(np.asarray(store.embeddings), expected, atol=1e-5, rtol=0)


def test_propositions_are_refused_by_name(ten, tmp_path) -> None:
    spec = {**MINILM, "late_chunking": True}
    with pytest.raises(DataError, match=r"retriever\.late_chunking.*not a span of its passage"):
        encode_units_to_dir(ten["files"]["proposition"], spec, tmp_path / "p", CPU, shard_size=64)
    cfg = compose_config("evaluate", "granularity=proposition", "retriever.late_chunking=true")
    with pytest.raises(PreflightError, match=r"retriever\.late_chunking=true: proposition"):
        check_late_units(cfg)
    cfg = compose_config("evaluate", "granularity=mixed", "retriever.late_chunking=true")
    with pytest.raises(PreflightError, match="retriever.late_chunking"):
        check_late_units(cfg)
    check_late_units(compose_config("evaluate", "granularity=sentence",
                                    "retriever.late_chunking=true"))  # fmt: skip
    with pytest.raises(ValueError, match=r"retriever\.late_chunking: .*pools by cls"):
        RetrieverSpec(name="tasb", query_model="x", pooling="cls", late_chunking=True)


def test_late_setting_keys_embeddings_apart(ten, tmp_path) -> None:
    units_path = ten["files"]["sentence"]
    plain = RetrieverSpec(**MINILM)
    assert not any(k.startswith("late") for k in plain.cache_fields("doc"))  # old keys kept
    late = dataclasses.replace(plain, late_chunking=True)
    assert late.cache_fields("doc")["late_context"] == "passage"
    dirs = {
        embeddings_dir(units_path, s, tmp_path, 64)
        for s in (plain, late, dataclasses.replace(late, late_overlap=32))
    }
    assert len(dirs) == 3
    same = dataclasses.replace(plain, late_overlap=32)  # late off: its settings change nothing
    assert embeddings_dir(units_path, same, tmp_path, 64) == embeddings_dir(
        units_path, plain, tmp_path, 64
    )


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_exported_runtimes_pool_the_same_token_states(ten, runtime, tmp_path) -> None:
    """onnx / openvino: the token states run as an exported graph (keyed apart from the pooled
    one); the late vectors equal torch's."""
    pytest.importorskip("onnxruntime" if runtime == "onnx" else "openvino")
    base = {**MINILM, "late_chunking": True, "export_dir": str(tmp_path)}
    torch_enc = load_encoder(RetrieverSpec(**base), "doc")
    enc = load_encoder(RetrieverSpec(**{**base, "runtime": runtime}), "doc")
    units = _units(ten["files"]["sentence"])
    contexts = []
    for p in ten["passages"][:4]:
        mine = [u["text"] for u in units if u["passage_id"] == p["id"]]
        text = p["title"] + " " + p["text"]
        spans = find_spans(p["text"], mine)
        contexts.append(LateContext(np.arange(len(mine)), text, spans, len(p["title"]) + 1))
    feats = tokenize_late(torch_enc, contexts, overlap=16)
    with torch.no_grad():
        expected, got = torch_enc(feats).numpy(), enc(feats).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4)
    exports = sorted(p.parent.name for p in tmp_path.rglob("model.onnx"))
    assert len(exports) == 2  # the pooled graph (queries) and the token states, keyed apart


@pytest.mark.parametrize(
    "overrides, name",
    [
        ([], "sentence"),
        (["retriever.late_chunking=true"], "sentence-late"),
        (
            ["retriever.late_chunking=true", "retriever.late_context=section"],
            "sentence-late-section",
        ),
    ],
)
def test_a_late_cell_is_named_apart_in_the_tables(overrides, name) -> None:
    """A late-chunked cell is a granularity of its own in table2.md (`sentence-late`), and so
    is each context (two late cells of one sweep would otherwise be one duplicate row)."""
    from densex.pipelines.evaluate.cell import cell_keys

    cfg = compose_config("evaluate", "corpus=squad-open", "dataset=squad-open",
                         "retriever=minilm", "granularity=sentence", *overrides)  # fmt: skip
    assert cell_keys(cfg)["granularity"] == name

"""`retriever=hash`: signed feature hashing of DPR tokens (retrieval/hashing.py), on real data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from densex.metrics.answers import SimpleTokenizer, dpr_words, has_answer
from densex.retrieval.encoders import DenseRetriever, format_units, load_encoder
from densex.retrieval.hashing import HashEncoder
from densex.retrieval.spec import RetrieverSpec

SRC = Path(__file__).resolve().parents[1] / "src"


def _read(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _encode(enc: HashEncoder, texts: list) -> np.ndarray:
    return enc(enc.tokenize(texts)).numpy()


def _dpr(text: str) -> list[str]:
    """DPR's own way: NFD, SimpleTokenizer, then each token lower-cased."""
    return SimpleTokenizer().tokenize(unicodedata.normalize("NFD", text), uncased=True)


@pytest.fixture(scope="module")
def passages(squad_open: Path) -> list[dict]:
    return _read(squad_open / "passages.jsonl")


def test_dpr_words_are_dprs_tokens(passages, squad_open) -> None:
    texts = [p["text"] for p in passages] + [
        q["question"] for q in _read(squad_open / "questions.jsonl")[:2000]
    ]
    assert all(dpr_words(t) == _dpr(t) for t in texts)
    # lower-casing the text first is only safe where no character changes category: check
    # every code point that lower-casing changes, alone and between letters and digits
    cased = [c for c in map(chr, range(0x110000)) if not 0xD800 <= ord(c) < 0xE000]
    cased = [c for c in cased if c.lower() != c]
    assert len(cased) > 1000
    for c in cased:
        for text in (c, f"a{c}b", f"1 {c}{c}.", f"{c}'{c}"):
            assert dpr_words(text) == _dpr(text), (hex(ord(c)), text)
    # the one context-dependent mapping (final sigma) is tokenised first, as DPR does
    assert dpr_words("ΑΣ.Β") == _dpr("ΑΣ.Β") == ["ας", ".", "β"]


def test_bucket_and_sign_of_one_token() -> None:
    dim = 1000  # not a power of two: the bucket is bits 0-30 modulo dim
    for token in ("x", "paris", "1973", "é"):
        h = zlib.crc32(unicodedata.normalize("NFD", token).encode("utf-8"))
        vec = _encode(HashEncoder(dim), [token, f"{token} {token.upper()} {token}"])
        expected = np.zeros(dim, np.float32)
        expected[(h & 0x7FFFFFFF) % dim] = -1.0 if h >> 31 else 1.0
        assert np.array_equal(vec[0], expected) and np.array_equal(vec[1], expected)
    # both signs occur over real-looking tokens
    signs = {zlib.crc32(t.encode()) >> 31 for t in ("paris", "london", "the", "of", "1973", "x")}
    assert signs == {0, 1}


def test_counts_bag_of_words_and_case() -> None:
    enc = HashEncoder(1 << 16)
    v = _encode(
        enc,
        [
            "The oil crisis began in October 1973.",
            "1973 October in began crisis oil the .",  # same tokens, another order
            "THE OIL CRISIS BEGAN IN OCTOBER 1973.",
            "Whales sing underwater songs",  # no shared token
            "",
            "apple apple banana",
        ],
    )
    assert np.array_equal(v[0], v[1]) and np.array_equal(v[0], v[2])
    assert np.allclose(np.linalg.norm(v[[0, 3, 5]], axis=1), 1.0, atol=1e-6)
    assert not v[4].any()  # no tokens: the zero vector, not NaN
    assert abs(float(v[0] @ v[3])) < 1e-6  # disjoint vocabularies: orthogonal (no collision)
    # term counts: apple twice, banana once -> |values| 2/sqrt(5) and 1/sqrt(5)
    assert np.allclose(sorted(np.abs(v[5][v[5] != 0])), [1 / np.sqrt(5), 2 / np.sqrt(5)])
    # token counts as tokenize hashes them
    texts = ["Obama's 1,000 cars", "", "a b"]
    assert enc.token_lengths(texts).tolist() == [7, 0, 2]
    assert enc.tokenize(texts)["hash_lengths"].tolist() == [7, 0, 2]
    assert enc.max_tokens >= 2**31 - 1 and enc.max_length >= 2**31 - 1
    # a (title, text) pair is "title text"
    assert np.array_equal(_encode(enc, [("Title", "text")]), _encode(enc, ["Title text"]))


def test_vectors_identical_in_another_process(passages) -> None:
    """CRC-32, not Python's salted hash(): a fresh interpreter with another hash seed gives
    bit-identical vectors."""
    texts = [p["text"] for p in passages[:50]]
    here = _encode(HashEncoder(512), texts)
    code = (
        "import json, sys\n"
        "from densex.retrieval.hashing import HashEncoder\n"
        "enc = HashEncoder(512)\n"
        "texts = json.loads(sys.stdin.read())\n"
        "sys.stdout.buffer.write(enc(enc.tokenize(texts)).numpy().tobytes())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(texts).encode(),
        capture_output=True,
        env=env,
        check=True,
        timeout=120,
    ).stdout
    assert out == here.tobytes()


def _compose(repo_root: Path, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        return compose("evaluate", overrides=["retriever=hash", *overrides])


def test_spec_from_hydra_and_validation(repo_root) -> None:
    spec = RetrieverSpec.from_cfg(_compose(repo_root).retriever)
    assert (spec.name, spec.type, spec.dim, spec.query_model) == ("hash", "hash", 256, None)
    fields = spec.cache_fields("doc")
    assert fields["dim"] == 256 and "pooling" not in fields and "max_length" not in fields
    assert isinstance(load_encoder(spec, "doc"), HashEncoder)
    assert load_encoder(spec, "query").dim == 256
    wide = RetrieverSpec.from_cfg(_compose(repo_root, "retriever.dim=4096").retriever)
    assert wide.cache_fields("doc") != fields
    with pytest.raises(ValueError, match="dim >= 1"):
        RetrieverSpec.from_cfg(_compose(repo_root, "retriever.dim=0").retriever)
    with pytest.raises(ValueError, match="dim >= 1"):
        RetrieverSpec.from_cfg({"name": "h", "type": "hash"})
    with pytest.raises(ValueError, match="no model"):
        RetrieverSpec.from_cfg({"name": "h", "type": "hash", "dim": 8, "query_model": "m"})
    with pytest.raises(ValueError, match="needs a query_model"):
        RetrieverSpec.from_cfg({"name": "d"})
    with pytest.raises(ValueError, match="only for type hash"):
        RetrieverSpec.from_cfg({"name": "d", "query_model": "m", "dim": 8})
    with pytest.raises(ValueError, match="side"):
        load_encoder(spec, "passage")
    # dense cache keys are unchanged by the new field (cached embeddings stay valid)
    assert "dim" not in RetrieverSpec(name="d", query_model="m").cache_fields("doc")


def test_dense_retriever_runs_hash(repo_root) -> None:
    spec = RetrieverSpec.from_cfg(_compose(repo_root).retriever)
    r = DenseRetriever(spec)
    q = r.encode_queries(["Who founded OAPEC?", "", "who founded oapec ?"], batch_size=2)
    assert q.dtype == np.float32 and q.shape == (3, 256) and r.dim == 256
    assert np.array_equal(q[0], q[2]) and not q[1].any()
    units = [{"title": "1973 oil crisis", "text": "OAPEC proclaimed an oil embargo."}]
    assert format_units(spec, units) == ["1973 oil crisis OAPEC proclaimed an oil embargo."]
    assert np.array_equal(
        r.encode_units(units), _encode(HashEncoder(256), format_units(spec, units))
    )
    # bf16 autocast does not touch the counts
    bf16 = DenseRetriever(RetrieverSpec(name="h", type="hash", dim=256, precision="bf16-mixed"))
    with torch.no_grad():
        assert np.array_equal(bf16.encode_queries(["Who founded OAPEC?"]), q[:1])


def test_recall_on_squad_open(passages, squad_open) -> None:
    """Exact inner-product search over the ~2.2k squad-open passages with the first 300
    questions: a lexical baseline well above a random ranking (measured: recall@20 0.59 at
    dim 4096, 0.50 at 256; random 0.07)."""
    import faiss

    questions = _read(squad_open / "questions.jsonl")[:300]
    texts = [f"{p['title']} {p['text']}" for p in passages]
    qtexts = [q["question"] for q in questions]

    def recall_at_20(top: np.ndarray) -> float:
        return float(
            np.mean(
                [
                    any(has_answer(q["answers"], texts[j]) for j in row[:20])
                    for q, row in zip(questions, top)
                ]
            )
        )

    recall = {}
    for dim in (256, 4096):
        enc = HashEncoder(dim)
        index = faiss.IndexFlatIP(dim)
        index.add(_encode(enc, texts))
        recall[dim] = recall_at_20(index.search(_encode(enc, qtexts), 20)[1])
    rng = np.random.default_rng(0)
    random = recall_at_20(np.stack([rng.permutation(len(texts))[:20] for _ in questions]))
    assert random < 0.15
    # deterministic (hashing + exact search): the measured figures, to one question of 300
    # (a near-tie at the 20th place may reorder with the BLAS summation order)
    assert recall == pytest.approx({256: 150 / 300, 4096: 177 / 300}, abs=1 / 300)
    assert recall[4096] > recall[256] > 2 * random  # fewer collisions, better ranking


def test_text_encoder_token_lengths_tell_truncation(minilm_path, passages) -> None:
    """`TextEncoder.token_lengths` / `max_tokens`: a unit is over `max_tokens` exactly when
    `tokenize` cuts it (real MiniLM tokenizer, real passages, max_length 64)."""
    spec = RetrieverSpec(
        name="minilm",
        query_model=minilm_path,
        backend="sentence-transformers",
        pooling="st",
        max_length=64,
        title="pair",
    )
    enc = load_encoder(spec, "doc")
    assert enc.max_tokens == 62  # [CLS] ... [SEP]
    texts = format_units(spec, passages[:40])
    lengths = enc.token_lengths(texts)
    flat = [f"{t} {x}" for t, x in texts]
    full = [len(ids) for ids in enc.tokenizer(flat, add_special_tokens=False)["input_ids"]]
    assert lengths.tolist() == [min(n, 65) for n in full]
    cut = lengths > enc.max_tokens
    assert 0 < cut.sum() < len(texts)
    mask = enc.tokenize(flat)["attention_mask"].sum(1).numpy()
    assert (mask[cut] == 64).all() and (mask[~cut] == lengths[~cut] + 2).all()
    assert enc.token_lengths([]).shape == (0,)

"""Retriever specs and pooling, checked against hand computations on tiny local models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tests.helpers.config import group_config

from densex.retrieval.encoders import format_units
from densex.retrieval.spec import RetrieverSpec
from helpers.typed import build_retriever

torch.set_num_threads(1)

TEXTS = ["Who wrote the Iliad?", "The 1973 oil crisis began in October 1973 when OAPEC"]
UNITS = [
    {"title": "Iliad", "text": "The Iliad is an ancient Greek epic poem attributed to Homer."},
    {"title": "", "text": "Short one."},
    {"title": "Oil crisis", "text": "OAPEC proclaimed an oil embargo " * 5},
]


def _cfg(name: str, model: str, **over) -> dict:
    base = {"name": name, "query_model": model, "max_length": 64, "query_max_length": 32}
    return {**base, **over, "device": "cpu"}


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, minilm_path) -> dict[str, Path]:
    """Random tiny BERT / DPR question+context / DistilBERT models with MiniLM's tokenizer."""
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertModel,
        DistilBertConfig,
        DistilBertModel,
        DPRConfig,
        DPRContextEncoder,
        DPRQuestionEncoder,
    )

    tok = AutoTokenizer.from_pretrained(minilm_path)
    root = tmp_path_factory.mktemp("tiny")
    small = dict(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    builders = {
        "bert": lambda: BertModel(BertConfig(**small)),
        "dpr_q": lambda: DPRQuestionEncoder(DPRConfig(**small)),
        "dpr_c": lambda: DPRContextEncoder(DPRConfig(**small)),
        "distilbert": lambda: DistilBertModel(
            DistilBertConfig(
                vocab_size=tok.vocab_size,
                dim=32,
                n_layers=2,
                n_heads=2,
                hidden_dim=64,
                max_position_embeddings=128,
            )
        ),
    }
    out = {}
    for i, (name, build) in enumerate(builders.items()):
        torch.manual_seed(i)
        path = root / name
        build().save_pretrained(path)
        tok.save_pretrained(path)
        out[name] = path
    return out


@pytest.fixture(scope="module")
def tiny_gtr(tmp_path_factory, tiny_t5) -> Path:
    """A GTR-shaped SentenceTransformer: T5 encoder + mean Pooling + Dense + Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        Normalize,
        Pooling,
        Transformer,
    )

    torch.manual_seed(0)
    tr = Transformer(str(tiny_t5), max_seq_length=64)
    dim = tr.get_embedding_dimension()
    modules = [
        tr,
        Pooling(dim, "mean"),
        Dense(dim, 16, bias=False, activation_function=torch.nn.Identity()),
        Normalize(),
    ]
    path = tmp_path_factory.mktemp("gtr") / "st"
    SentenceTransformer(modules=modules, device="cpu").save(str(path))
    return path


def _tok(path: Path, texts, pair=None, max_length=64):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    return tok(
        texts, pair, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
    )


def test_paper_retriever_configs_have_the_paper_checkpoints(repo_root: Path) -> None:
    expected = {
        "simcse": ("princeton-nlp/unsup-simcse-bert-base-uncased", None, "cls", "cos"),
        "contriever": ("facebook/contriever", None, "mean", "dot"),
        "dpr": (
            "facebook/dpr-question_encoder-multiset-base",
            "facebook/dpr-ctx_encoder-multiset-base",
            "pooler",
            "dot",
        ),
        "ance": (
            "castorini/ance-dpr-question-multi",
            "castorini/ance-dpr-context-multi",
            "pooler",
            "dot",
        ),
        "tasb": ("sentence-transformers/msmarco-distilbert-base-tas-b", None, "cls", "dot"),
        "gtr": ("sentence-transformers/gtr-t5-base", None, "st", "cos"),
        "minilm": ("packaged:minilm", None, "st", "cos"),
    }
    for name, (q, d, pooling, sim) in expected.items():
        spec = RetrieverSpec.from_cfg(group_config("retriever", f"{name}"))
        assert (spec.name, spec.query_model, spec.doc_model) == (name, q, d)
        assert (spec.pooling, spec.similarity) == (pooling, sim)
    for name in ("dpr", "ance"):
        spec = RetrieverSpec.from_cfg(group_config("retriever", f"{name}"))
        assert spec.title == "pair"


def test_spec_rejects_typos_and_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown config keys"):
        RetrieverSpec.from_cfg({"name": "x", "query_model": "m", "poolin": "cls"})
    with pytest.raises(ValueError, match="pooling"):
        RetrieverSpec.from_cfg({"name": "x", "query_model": "m", "pooling": "max"})
    with pytest.raises(FileNotFoundError):
        build_retriever(_cfg("x", "/no/such/model")).encode_queries(["q"])


def test_cls_cosine_is_normalised_first_token(tiny_models) -> None:
    """simcse: last_hidden_state[:, 0] (before BERT's pooler), L2-normalised."""
    from transformers import BertModel

    path = tiny_models["bert"]
    r = build_retriever(_cfg("simcse", str(path), pooling="cls", similarity="cos"))
    got = r.encode_queries(TEXTS)
    model = BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        out = model(**_tok(path, TEXTS, max_length=32))
    cls = out.last_hidden_state[:, 0]
    want = (cls / cls.norm(dim=-1, keepdim=True)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got.dtype == np.float32
    # not the pooler output (tanh dense on CLS)
    assert not np.allclose(got, torch.nn.functional.normalize(out.pooler_output).numpy(), atol=1e-3)


def test_masked_mean_dot_matches_unpadded_mean(tiny_models) -> None:
    """contriever: mean over real tokens only = the mean of each text encoded alone."""
    from transformers import AutoTokenizer, BertModel

    path = tiny_models["bert"]
    r = build_retriever(_cfg("contriever", str(path), pooling="mean", similarity="dot"))
    got = r.encode_units(UNITS)
    model, tok = BertModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    texts = format_units(r.spec, UNITS)
    assert texts[0] == "Iliad The Iliad is an ancient Greek epic poem attributed to Homer."
    assert texts[1] == "Short one."
    with torch.no_grad():
        want = np.stack(
            [
                model(**tok(t, truncation=True, max_length=64, return_tensors="pt"))
                .last_hidden_state[0]
                .mean(0)
                .numpy()
                for t in texts
            ]
        )
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)  # dot: not normalised


def test_dpr_pooler_pair_encoding_and_separate_encoders(tiny_models) -> None:
    """dpr/ance: question and context checkpoints, pooler_output = CLS, (title, text) pairs."""
    from transformers import AutoTokenizer, DPRContextEncoder, DPRQuestionEncoder

    q, c = tiny_models["dpr_q"], tiny_models["dpr_c"]
    r = build_retriever(_cfg("dpr", str(q), doc_model=str(c), pooling="pooler", title="pair"))
    assert type(r.doc_encoder.model) is DPRContextEncoder
    assert type(r.query_encoder.model) is DPRQuestionEncoder
    tok = AutoTokenizer.from_pretrained(c)
    feats = r.doc_encoder.tokenize(format_units(r.spec, UNITS[:1]))
    want_ids = tok(UNITS[0]["title"], UNITS[0]["text"])["input_ids"]
    assert feats["input_ids"][0].tolist() == want_ids  # [CLS] title [SEP] text [SEP]
    ctx = DPRContextEncoder.from_pretrained(c).eval()
    titles, texts = [u["title"] for u in UNITS], [u["text"] for u in UNITS]
    with torch.no_grad():
        enc = _tok(c, titles, texts)
        want = ctx.ctx_encoder.bert_model(**enc).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(r.encode_units(UNITS), want, atol=1e-5)
    qenc = DPRQuestionEncoder.from_pretrained(q).eval()
    with torch.no_grad():
        wq = qenc.question_encoder.bert_model(**_tok(q, TEXTS, max_length=32)).last_hidden_state
    np.testing.assert_allclose(r.encode_queries(TEXTS), wq[:, 0].numpy(), atol=1e-5)


def test_distilbert_cls_dot_and_prefixes(tiny_models) -> None:
    """tasb: DistilBERT CLS, unnormalised; query/doc prefixes are prepended."""
    from transformers import DistilBertModel

    path = tiny_models["distilbert"]
    r = build_retriever(
        _cfg(
            "tasb",
            str(path),
            pooling="cls",
            query_prefix="query: ",
            doc_prefix="passage: ",
            title="none",
        )
    )
    model = DistilBertModel.from_pretrained(path).eval()
    with torch.no_grad():
        want = model(**_tok(path, ["query: " + t for t in TEXTS], max_length=32))
    np.testing.assert_allclose(
        r.encode_queries(TEXTS), want.last_hidden_state[:, 0].numpy(), atol=1e-5
    )
    with torch.no_grad():
        wd = model(**_tok(path, ["passage: " + u["text"] for u in UNITS]))
    np.testing.assert_allclose(r.encode_units(UNITS), wd.last_hidden_state[:, 0].numpy(), atol=1e-5)


def test_gtr_modules_mean_dense_normalize_by_hand(tiny_gtr) -> None:
    from sentence_transformers import SentenceTransformer

    # query_max_length = the module's max_seq_length, so st.encode truncates the same way
    r = build_retriever(
        _cfg(
            "gtr",
            str(tiny_gtr),
            backend="sentence-transformers",
            pooling="st",
            similarity="cos",
            query_max_length=64,
        )
    )
    got = r.encode_queries(TEXTS)
    st = SentenceTransformer(str(tiny_gtr), device="cpu")
    enc, dense = st[0].auto_model.eval(), st[2]
    ids = st.tokenizer(TEXTS, padding=True, truncation=True, max_length=64, return_tensors="pt")
    assert ids["attention_mask"].sum(1).min() < ids["attention_mask"].shape[1]  # padding present
    with torch.no_grad():
        h = enc(**ids).last_hidden_state
        m = ids["attention_mask"].unsqueeze(-1).float()
        pooled = (h * m).sum(1) / m.sum(1)
        proj = pooled @ dense.linear.weight.T
        want = (proj / proj.norm(dim=-1, keepdim=True)).numpy()
    assert got.shape == (2, 16)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(got, st.encode(TEXTS), atol=1e-5)


def test_minilm_matches_sentence_transformers(minilm_path, squad_open: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from densex.utils.io import read_jsonl

    units = [u for _, u in zip(range(12), read_jsonl(squad_open / "passages.jsonl"))]
    cfg = group_config("retriever", "minilm")
    cfg.device = "cpu"
    r = build_retriever(cfg)
    st = SentenceTransformer(minilm_path, device="cpu")
    texts = [u["title"] + " " + u["text"] for u in units]
    np.testing.assert_allclose(r.encode_units(units), st.encode(texts), atol=1e-5)
    np.testing.assert_allclose(r.encode_queries(TEXTS), st.encode(TEXTS), atol=1e-5)
    # query and document sides share one copy of the weights
    assert r.query_encoder.model is r.doc_encoder.model


def test_long_query_through_minilm_config_equals_sentence_transformers(
    minilm_path, repo_root: Path
) -> None:
    """`query_max_length: null` = the module's max_seq_length, as `SentenceTransformer.encode`
    (a 64-token cut would change a 400-word query's vector)."""
    from sentence_transformers import SentenceTransformer

    cfg = group_config("retriever", "minilm")
    cfg.device = "cpu"
    r = build_retriever(cfg)
    st = SentenceTransformer(minilm_path, device="cpu")
    words = ("the quick brown fox jumps over a lazy dog near Paris in 1889 " * 40).split()
    query = " ".join(words[:400])
    assert r.query_encoder.max_length == st.max_seq_length == 256
    np.testing.assert_allclose(r.encode_queries([query]), st.encode([query]), atol=1e-5)


def test_retriever_configs_encode_in_fp32_without_a_64_token_query_cut(repo_root: Path) -> None:
    for path in sorted((repo_root / "conf/retriever").glob("*.yaml")):
        if path.stem.startswith("schema"):
            continue
        cfg = group_config("retriever", path.stem)
        if cfg.get("type", "dense") != "dense":
            continue
        spec = RetrieverSpec.from_cfg(cfg)
        assert spec.precision == "32-true", path.name
        assert spec.query_max_length is None, path.name
        assert spec.cache_fields("doc")["precision"] == "32-true"
    with pytest.raises(ValueError, match="precision"):
        RetrieverSpec.from_cfg({"name": "x", "query_model": "m", "precision": "bf16"})


def test_hf_query_max_length_none_is_the_model_limit(tiny_models) -> None:
    """hf backend: `None` truncates at the tokenizer/model limit (128 positions here)."""
    r = build_retriever(_cfg("contriever", str(tiny_models["bert"]), query_max_length=None))
    assert r.query_encoder.max_length == 128
    long = " ".join(["word"] * 400)
    assert r.encode_queries([long]).shape == (1, 32)  # no position-embedding overflow


def test_bf16_precision_autocasts_queries_like_units(tiny_models) -> None:
    """`precision: bf16-mixed` encodes queries under the autocast Lightning uses for units."""
    path = str(tiny_models["bert"])
    fp32 = build_retriever(_cfg("contriever", path, pooling="mean"))
    bf16 = build_retriever(_cfg("contriever", path, pooling="mean", precision="bf16-mixed"))
    a, b = fp32.encode_queries(TEXTS), bf16.encode_queries(TEXTS)
    assert b.dtype == np.float32
    assert 1e-6 < np.abs(a - b).max() < 0.05  # autocast ran (fp32 reruns are bit-identical)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.inference_mode():
        feats = bf16.query_encoder.tokenize(TEXTS)
        want = bf16.query_encoder(feats).float().numpy()
    np.testing.assert_allclose(b, want, atol=1e-6)

"""Dense retrievers as the paper runs them: checkpoints, pooling, similarity, title handling.

One `RetrieverSpec` (a `conf/retriever/*.yaml`) says everything that changes an embedding, so the
same spec drives encoding, caching (its fields are part of the cache key) and query encoding.
`TextEncoder` is the torch module Lightning runs in `Trainer.predict`; `DenseRetriever` pairs a
query and a document encoder (loaded lazily: a searcher only needs the query side).
`type: hash` (`retrieval.hashing.HashEncoder`) has the same interface without a model;
`load_encoder` gives either for one side. `retriever.runtime=onnx|openvino` runs the same forward
exported to ONNX (`retrieval.runtimes`); tokenisation stays here, shared by every runtime.

Why this module is long: `TextEncoder` holds one model's tokenizer, pooling and runtime
(torch, exported, late chunking's token states) behind one `forward`; `DenseRetriever` and
the title handling read those same fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from densex.retrieval.hashing import HashEncoder
from densex.retrieval.late import LATE_INDEX, check_late, late_forward
from densex.retrieval.runtimes import ExportedEncoder, exported_encoder
from densex.retrieval.spec import RetrieverSpec
from densex.utils.models import MODEL_LOAD_LOCK, resolve_model
from densex.utils.records import Record

# The autocast dtype of a spec's `precision` (none for 32-true), as Lightning's mixed precision.
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def _load_hf_model(path: str, **kwargs: Any) -> nn.Module:
    """AutoModel, except DPR checkpoints whose class (question/context) is in `architectures`.

    AutoModel maps every `dpr` config to DPRQuestionEncoder, which would silently load a context
    encoder's weights into the wrong module names (random weights); ANCE-multi ships as DPR too.
    """
    from transformers import (
        AutoConfig,
        AutoModel,
        DPRContextEncoder,
        DPRQuestionEncoder,
        T5EncoderModel,
    )

    config = AutoConfig.from_pretrained(path)
    arch = (getattr(config, "architectures", None) or [""])[0]
    cls = {"dpr": DPRQuestionEncoder, "t5": T5EncoderModel}.get(config.model_type, AutoModel)
    if config.model_type == "dpr" and arch == "DPRContextEncoder":
        cls = DPRContextEncoder
    with MODEL_LOAD_LOCK:
        return cls.from_pretrained(path, **kwargs)


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of token vectors over real (non-padding) tokens, as Contriever does."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


class TextEncoder(nn.Module):
    """Tokenised batch -> pooled (and, for cosine, L2-normalised) float32 embeddings.

    With `spec.runtime` onnx/openvino, `forward` runs `torch_forward` exported to ONNX (the
    model loaded with eager attention, which the tracer exports exactly); `exported` is None
    for torch."""

    def __init__(self, model_path: str, spec: RetrieverSpec, max_length: int | None) -> None:
        super().__init__()
        self.spec = spec
        path = resolve_model(model_path)
        # the tracer bakes sdpa's mask handling into fixed shapes; eager attention exports exactly
        kwargs = {"attn_implementation": "eager"} if spec.runtime != "torch" else {}
        if spec.backend == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            with MODEL_LOAD_LOCK:
                self.model: nn.Module = SentenceTransformer(path, device="cpu", model_kwargs=kwargs)
            self.tokenizer = self.model.tokenizer
        else:
            from transformers import AutoTokenizer

            self.model = _load_hf_model(path, **kwargs)
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model.eval()
        self.max_length = _resolve_max_length(self, max_length)
        self.exported: ExportedEncoder | None = None
        if spec.runtime != "torch":
            self.exported = exported_encoder(self, path)
        self.model_path, self.token_graph = path, None  # late chunking's, onnx/openvino
        check_late(self)  # late chunking: the model can pool a span's tokens

    def tokenize(self, texts: Sequence[str] | Sequence[tuple[str, str]]) -> dict[str, Any]:
        """Pairs `(title, text)` truncate only the text, as DPR/pyserini encode passages."""
        texts = list(texts)
        if self.spec.backend == "sentence-transformers":
            return self.model.preprocess(
                texts, processing_kwargs={"text": {"max_length": self.max_length}}
            )
        if texts and isinstance(texts[0], tuple):
            first, second = [t[0] for t in texts], [t[1] for t in texts]
            return self.tokenizer(
                first,
                second,
                padding=True,
                truncation="only_second",
                max_length=self.max_length,
                return_tensors="pt",
            )
        return self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )

    def forward(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if LATE_INDEX in features:
            return late_forward(self, features)
        if self.exported is not None:
            return self.exported(features)
        return self.torch_forward(features)

    def torch_forward(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The torch path: model, pooling, float32, L2 normalisation for cosine."""
        pooling = self.spec.pooling
        if pooling == "st":
            emb = self.model(dict(features))["sentence_embedding"]
        else:
            inputs = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}
            out = self.model(**inputs)
            if pooling == "pooler":
                emb = out.pooler_output
            elif pooling == "cls":
                emb = out.last_hidden_state[:, 0]
            else:
                emb = masked_mean(out.last_hidden_state, inputs["attention_mask"])
        emb = emb.float()
        if self.spec.similarity == "cos":
            emb = nn.functional.normalize(emb, p=2, dim=-1)
        return emb

    @property
    def max_tokens(self) -> int:
        """Text tokens that fit: `max_length` less the special tokens of a single sequence."""
        return self.max_length - self.tokenizer.num_special_tokens_to_add(pair=False)

    def token_lengths(self, texts: Sequence[str] | Sequence[tuple[str, str]]) -> np.ndarray:
        """Tokens per text without specials (int64; a pair counts as "title text"), capped at
        `max_length + 1`: exact up to the limit, and enough to tell which `tokenize` truncates
        (those over `max_tokens`)."""
        flat = [t if isinstance(t, str) else f"{t[0]} {t[1]}" for t in texts]
        if not flat:
            return np.zeros(0, dtype=np.int64)
        ids = self.tokenizer(
            flat, add_special_tokens=False, truncation=True, max_length=self.max_length + 1
        )["input_ids"]
        return np.array([len(x) for x in ids], dtype=np.int64)

    @property
    def dim(self) -> int:
        if self.spec.backend == "sentence-transformers":
            return int(self.model.get_sentence_embedding_dimension())
        cfg = self.model.config
        return int(
            getattr(cfg, "projection_dim", 0) or getattr(cfg, "hidden_size", 0) or cfg.d_model
        )


def format_units(spec: RetrieverSpec, units: Sequence[Record]) -> list:
    """Units -> what the document tokenizer takes: strings, or (title, text) pairs for 'pair'."""
    return format_unit_texts(spec, [u.get("title") for u in units], [u["text"] for u in units])


def format_unit_texts(
    spec: RetrieverSpec, titles: Sequence[str | None], texts: Sequence[str]
) -> list:
    """`format_units` from parallel title and text columns (what the Arrow tables hold)."""
    out: list = []
    for title, text in zip(titles, texts):
        title = (title or "").strip()
        if spec.title == "pair":
            out.append((spec.doc_prefix + title, text))
        elif spec.title == "prefix" and title:
            out.append(spec.doc_prefix + title + spec.title_sep + text)
        else:
            out.append(spec.doc_prefix + text)
    return out


def format_queries(spec: RetrieverSpec, queries: Sequence[str]) -> list[str]:
    return [spec.query_prefix + q for q in queries]


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_encoder(spec: RetrieverSpec, side: str) -> TextEncoder | HashEncoder:
    """The encoder of one side ("query" | "doc"), on the CPU: a `TextEncoder` with that side's
    model and max length, or a `HashEncoder` (the same for both sides) for type hash."""
    if side not in ("query", "doc"):
        raise ValueError(f"side must be 'query' or 'doc', got {side!r}")
    if spec.type == "hash":
        return HashEncoder(int(spec.dim))  # type: ignore[arg-type]
    if side == "query":
        return TextEncoder(spec.query_model, spec, spec.query_max_length)  # type: ignore[arg-type]
    return TextEncoder(spec.doc_model_or_query, spec, spec.max_length)  # type: ignore[arg-type]


class DenseRetriever:
    """Query and document encoders of one retriever; encoders load on first use."""

    def __init__(self, spec: RetrieverSpec) -> None:
        self.spec = spec
        self._query: TextEncoder | HashEncoder | None = None
        self._doc: TextEncoder | HashEncoder | None = None
        self.device = torch.device(spec.device or _default_device())

    @property
    def _one_model(self) -> bool:
        """Queries and units go through the same checkpoint (all but DPR and ANCE)."""
        return self.spec.doc_model is None or self.spec.doc_model == self.spec.query_model

    @property
    def query_encoder(self) -> TextEncoder | HashEncoder:
        if self._query is None:
            if self._one_model and isinstance(self._doc, TextEncoder):
                self._query = _share(self._doc, self.spec.query_max_length)
            else:
                self._query = load_encoder(self.spec, "query")
            self._query.to(self.device)
        return self._query

    @property
    def doc_encoder(self) -> TextEncoder | HashEncoder:
        if self._doc is None:
            if self._one_model and isinstance(self._query, TextEncoder):
                self._doc = _share(self._query, self.spec.max_length)
            else:
                self._doc = load_encoder(self.spec, "doc")
            self._doc.to(self.device)
        return self._doc

    @torch.inference_mode()
    def _encode(
        self, encoder: TextEncoder | HashEncoder, texts: list, batch_size: int
    ) -> np.ndarray:
        """Batches under the spec's autocast, so queries see the precision units were encoded in
        (Lightning's bf16-mixed/16-mixed = torch.autocast on the device type)."""
        chunks = []
        dtype = AUTOCAST_DTYPES.get(self.spec.precision)
        for i in range(0, len(texts), batch_size):
            feats = encoder.tokenize(texts[i : i + batch_size])
            feats = {
                k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in feats.items()
            }
            with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
                emb = encoder(feats)
            chunks.append(emb.float().cpu().numpy())
        if not chunks:
            return np.zeros((0, encoder.dim), dtype=np.float32)
        return np.concatenate(chunks).astype(np.float32, copy=False)

    def encode_queries(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Queries -> float32 [n, dim] with the query encoder, prefix and max length."""
        return self._encode(
            self.query_encoder, format_queries(self.spec, texts), batch_size or self.spec.batch_size
        )

    def encode_units(self, units: Sequence[Record], batch_size: int | None = None) -> np.ndarray:
        """Unit dicts (title, text) -> float32 [n, dim]; in-process (Lightning: see encode.py).
        Late chunking needs each unit's passage: a units file through `encode_units_to_dir`."""
        if self.spec.late_chunking:
            raise ValueError("retriever.late_chunking: encode a units file (encode_units_to_dir)")
        texts = format_units(self.spec, units)
        return self._encode(self.doc_encoder, texts, batch_size or self.spec.batch_size)

    @property
    def dim(self) -> int:
        return (self._doc or self.query_encoder).dim


def _share(other: TextEncoder, max_length: int | None) -> TextEncoder:
    """A second view of the same weights with another max length (no second copy in memory)."""
    enc = TextEncoder.__new__(TextEncoder)
    nn.Module.__init__(enc)
    enc.spec = other.spec
    enc.model, enc.tokenizer, enc.exported = other.model, other.tokenizer, other.exported
    enc.model_path, enc.token_graph = other.model_path, other.token_graph
    enc.max_length = _resolve_max_length(enc, max_length)
    return enc


def _resolve_max_length(encoder: TextEncoder, max_length: int | None) -> int:
    """`None` -> the model's own limit: a SentenceTransformer's `max_seq_length` (what
    `SentenceTransformer.encode` truncates at), else the tokenizer's `model_max_length` capped by
    the model's position embeddings (some tokenizers report a huge sentinel)."""
    if max_length is not None:
        return int(max_length)
    if encoder.spec.backend == "sentence-transformers":
        return int(encoder.model.max_seq_length)
    limit = int(getattr(encoder.tokenizer, "model_max_length", 0) or 0)
    positions = getattr(encoder.model.config, "max_position_embeddings", None)
    if positions and (limit <= 0 or limit > positions):
        limit = int(positions)
    return limit if 0 < limit < 1_000_000 else 512


def build_retriever(spec: RetrieverSpec) -> DenseRetriever:
    """A `DenseRetriever` for `spec` (dense and hash retrievers)."""
    return DenseRetriever(spec)

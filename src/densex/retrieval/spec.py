"""What the `retriever` and `index` config groups say, as typed dataclasses (no torch, no faiss).

Each dataclass states its defaults once and is the schema Hydra composes the group's YAML files
onto (`densex.pipelines.schemas` registers them in the ConfigStore): a YAML file names only what
differs from the defaults, a misspelt key fails at composition naming the file, and
`OmegaConf.to_object(cfg.retriever)` (or `RetrieverSpec.from_cfg`) gives the validated object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from densex.utils.config import ConfigNode, check_choices, from_config

TYPES = ("dense", "hash")
POOLINGS = ("cls", "mean", "pooler", "st")
TITLE_MODES = ("pair", "prefix", "none")
SIMILARITIES = ("dot", "cos")
DTYPES = ("float32", "float16")
# Lightning precision of encoding (units under Trainer.predict, queries under the same autocast).
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
# Keys that only change how queries are encoded: left out of the document-embedding cache key.
QUERY_ONLY_KEYS = ("query_model", "query_max_length", "query_prefix")
# Keys that change speed, never values: left out of every cache key.
RUNTIME_KEYS = ("batch_size", "device", "export_dir")
# Model keys a hash retriever never reads (no model, no truncation, always float32 counts).
HASH_UNUSED_KEYS = (
    "backend", "pooling", "max_length", "query_max_length", "precision", "runtime", "quantize",
)  # fmt: skip
# What runs the encoder (`retrieval.runtimes`): torch, or the exported graph in onnxruntime /
# OpenVINO; int8 = onnxruntime's dynamic quantisation (weights int8, activations uint8)
RUNTIMES = ("torch", "onnx", "openvino")
QUANTIZE = ("none", "int8")
# Late chunking (`retrieval.late`): the text each unit's token span is pooled in
LATE_CONTEXTS = ("passage", "section")
# Keys of late chunking: in the document-embedding key only when `late_chunking` is on, so the
# keys (and cached embeddings) of every encoding from before late chunking stay where they were
LATE_KEYS = ("late_chunking", "late_context", "late_overlap")
# Keys that only change how units are encoded: left out of the query-embedding cache key
# (`retrieval.query_cache`), so cells that differ only on the document side share queries
DOC_ONLY_KEYS = ("doc_model", "max_length", "title", "title_sep", "doc_prefix", "dtype", *LATE_KEYS)


@dataclass
class RetrieverSpec:
    """A dense retriever: what to load, how to pool, how to turn a unit into text."""

    name: str
    query_model: str | None = None  # required for dense; None for hash (no model)
    doc_model: str | None = None  # None: one shared encoder for queries and units
    type: str = "dense"  # dense | hash (signed feature hashing of DPR tokens, no model)
    dim: int | None = None  # hash buckets (required for hash, and only there)
    backend: str = "hf"  # hf | sentence-transformers
    pooling: str = "cls"  # cls (last_hidden_state[:, 0]) | mean (masked) | pooler | st (ST modules)
    similarity: str = "dot"  # dot | cos (cos = L2-normalise, then inner product)
    max_length: int = 256
    # None: the model's own limit (sentence-transformers max_seq_length, else the tokenizer's)
    query_max_length: int | None = None
    title: str = "prefix"  # pair: tokenizer(title, text) as DPR | prefix: title+sep+text | none
    title_sep: str = " "
    query_prefix: str = ""
    doc_prefix: str = ""
    batch_size: int = 64
    dtype: str = "float32"  # storage dtype of unit embeddings
    # what encoding runs in (not the trainer's precision): 32-true | bf16-mixed | 16-mixed;
    # runtime openvino: 32-true or bf16-mixed (OpenVINO's bf16 inference precision); onnx: 32-true
    precision: str = "32-true"
    device: str | None = None  # for query encoding / encode_units; None = cuda if available
    # torch | onnx | openvino: the same forward, exported once to ONNX (`retrieval.runtimes`)
    runtime: str = "torch"
    quantize: str = "none"  # none | int8 (runtime onnx: onnxruntime dynamic int8)
    # where exports are cached; None = <paths.cache_dir>/exports (set by retrieval.build)
    export_dir: str | None = None
    # late chunking (Gunther et al. 2024): a unit's vector is the mean of the final token states
    # of its character span, its context encoded once (`late_context`: its passage, or its
    # section: the consecutive passages with its title and section), in windows of max_length
    # tokens sharing `late_overlap` tokens when longer (`retrieval.late`). Units must be spans
    # of their passage (passage, sentence; not generated propositions)
    late_chunking: bool = False
    late_context: str = "passage"
    late_overlap: int = 64

    def __post_init__(self) -> None:
        check_choices(
            f"retriever {self.name!r}",
            type=(self.type, TYPES),
            backend=(self.backend, ("hf", "sentence-transformers")),
            pooling=(self.pooling, POOLINGS),
            similarity=(self.similarity, SIMILARITIES),
            title=(self.title, TITLE_MODES),
            dtype=(self.dtype, DTYPES),
            precision=(self.precision, PRECISIONS),
            runtime=(self.runtime, RUNTIMES),
            quantize=(self.quantize, QUANTIZE),
        )
        self._check_runtime()
        self._check_late()
        if (self.backend == "sentence-transformers") != (self.pooling == "st"):
            raise ValueError(
                f"retriever {self.name!r}: pooling 'st' goes with backend 'sentence-transformers'"
            )
        if self.type == "hash":
            dim = self.dim
            if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
                raise ValueError(f"retriever {self.name!r}: type hash needs dim >= 1, got {dim!r}")
            if self.query_model or self.doc_model:
                raise ValueError(
                    f"retriever {self.name!r}: type hash has no model; set query_model and"
                    " doc_model to null"
                )
        else:
            if not self.query_model:
                raise ValueError(f"retriever {self.name!r}: type dense needs a query_model")
            if self.dim is not None:
                raise ValueError(f"retriever {self.name!r}: dim is only for type hash")

    def _check_runtime(self) -> None:
        """int8 runs in onnxruntime only; onnxruntime runs the exported graph in fp32, OpenVINO
        in fp32 or bf16 (`precision: bf16-mixed`: its bf16 inference precision)."""
        if self.quantize == "int8" and self.runtime != "onnx" and self.type != "hash":
            raise ValueError(
                f"retriever {self.name!r}: quantize int8 needs runtime onnx (onnxruntime's "
                f"dynamic int8), got runtime {self.runtime!r}"
            )
        allowed = {"torch": PRECISIONS, "onnx": ("32-true",), "openvino": ("32-true", "bf16-mixed")}
        if self.type != "hash" and self.precision not in allowed[self.runtime]:
            raise ValueError(
                f"retriever {self.name!r}: runtime {self.runtime!r} runs the exported graph in "
                f"precision {' or '.join(allowed[self.runtime])}, got {self.precision!r}"
            )

    def _check_late(self) -> None:
        """Late chunking mean-pools token spans: a dense model pooling by mean (`mean`, or `st`
        whose Pooling module is mean: checked when the model loads), a valid context and
        overlap."""
        check_choices(f"retriever {self.name!r}", late_context=(self.late_context, LATE_CONTEXTS))
        if not self.late_chunking:
            return
        where = f"retriever.late_chunking: retriever {self.name!r}"
        if self.type != "dense":
            raise ValueError(f"{where} has no token states (type {self.type}); use a dense one")
        if self.pooling in ("cls", "pooler"):
            raise ValueError(
                f"{where} pools by {self.pooling} (one vector per input, from its first token): "
                "a unit's span has no such token. Late chunking needs mean pooling (e.g. "
                "retriever=minilm, contriever or gtr), or retriever.late_chunking=false"
            )
        overlap = self.late_overlap
        if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
            raise ValueError(f"retriever.late_overlap must be an int >= 0, got {overlap!r}")

    @classmethod
    def from_cfg(cls, cfg: ConfigNode) -> RetrieverSpec:
        """From a Hydra node or dict; unknown keys are an error (a typo must not be ignored)."""
        if isinstance(cfg, RetrieverSpec):
            return cfg
        return from_config(cls, cfg, strict=True)

    @property
    def doc_model_or_query(self) -> str | None:
        return self.doc_model or self.query_model

    def cache_fields(self, side: str = "doc") -> dict[str, Any]:
        """The fields that determine document (side='doc'), query (side='query': the query
        model, prefix and max length, pooling, similarity, precision, runtime) or all (any
        other side) embeddings, for cache keys."""
        data = dataclasses.asdict(self)
        data["doc_model"] = self.doc_model_or_query
        only = {"doc": QUERY_ONLY_KEYS, "query": DOC_ONLY_KEYS}.get(side, ())
        drop = RUNTIME_KEYS + only
        if self.dim is None:  # dense: the keys (and cached embeddings) from before `dim`
            drop += ("dim",)
        if self.runtime == "torch" and self.quantize == "none":  # keys from before runtimes
            drop += ("runtime", "quantize")
        if self.type == "hash":
            drop += HASH_UNUSED_KEYS
        if not self.late_chunking:  # keys from before late chunking
            drop += LATE_KEYS
        return {k: v for k, v in data.items() if k not in drop}


# Search-time settings: applied when an index is loaded, never part of its build key.
SEARCH_KEYS = (
    "use_gpu",
    "search_batch_size",
    "params",
    "recall_queries",
    "recall_k",
    "blas_threshold",
)


@dataclass
class IndexSpec:
    """A `conf/index/*.yaml` node."""

    name: str = "flat"
    factory: str = "Flat"  # faiss.index_factory string; "{nlist}" -> 4*sqrt(n) (capped)
    num_shards: int = 1
    use_gpu: Any = "auto"  # auto | true | false
    # queries per faiss call: 512 searches a flat index ~5% faster than 256 (BLAS) at 92k units
    search_batch_size: int = 512
    train_size: int | None = None
    params: dict[str, Any] = field(default_factory=dict)  # nprobe, efSearch, ...
    recall_queries: int = 0
    recall_k: int = 10
    seed: int = 0
    # CPU RAM an index may hold at once: a bigger index is cut into shards of at most this
    # size, written as they are built and searched memory-mapped, one shard at a time
    memory_budget_gb: float = 1.0
    # faiss's `distance_compute_blas_threshold`: query batches of at least this many go through
    # BLAS (one GEMM per block of queries x rows, then the top-k), smaller ones through faiss's
    # own SIMD loops. Exact either way (scores differ in the 6th decimal; ties are broken by
    # row in `retrieval.search`). 20 is faiss's classic rule; this faiss-cpu build's own
    # default (null keeps it: 128000) sends every batch to the SIMD loops, 13x slower at 4M
    # units on a 2-core AVX-512 CPU (README, "Millions of units")
    blas_threshold: int | None = 20

    @classmethod
    def from_cfg(cls, cfg: ConfigNode | None) -> IndexSpec:
        """From a `conf/index` node or dict (None = the defaults); unknown keys are an error."""
        if isinstance(cfg, IndexSpec):
            return cfg
        return from_config(cls, cfg, strict=True)

    @property
    def exact(self) -> bool:
        return self.factory.replace(" ", "") == "Flat"

    def cache_fields(self) -> dict[str, Any]:
        """What changes the stored index. GPU use, batch size and search parameters (nprobe,
        efSearch) are applied at load time, and the recall check only measures, so changing them
        reuses the index (the manifest's recall says which `params` it was measured with)."""
        d = dataclasses.asdict(self)
        for k in SEARCH_KEYS:
            d.pop(k)
        return d


@dataclass
class BM25Spec:
    """A `conf/retriever/bm25.yaml` node: Lucene BM25 with pyserini's k1/b by default."""

    name: str = "bm25"
    type: str = "sparse"
    method: str = "lucene"
    k1: float = 0.9
    b: float = 0.4
    stemmer: str | None = None  # e.g. english (needs PyStemmer)
    stopwords: str | None = "en"
    lower: bool = True
    title: str = "prefix"  # prefix | none
    title_sep: str = " "

    def __post_init__(self) -> None:
        check_choices(f"retriever {self.name!r}", title=(self.title, ("prefix", "none")))

    @classmethod
    def from_cfg(cls, cfg: ConfigNode) -> BM25Spec:
        """From a `conf/retriever/bm25.yaml` node or dict; unknown keys are an error."""
        if isinstance(cfg, BM25Spec):
            return cfg
        return from_config(cls, cfg, strict=True)


def retriever_spec(cfg: ConfigNode) -> RetrieverSpec | BM25Spec:
    """The spec of a `retriever` node: `BM25Spec` for `type: sparse`, else `RetrieverSpec`."""
    if isinstance(cfg, (RetrieverSpec, BM25Spec)):
        return cfg
    sparse = str(cfg.get("type") or "dense") == "sparse"
    return BM25Spec.from_cfg(cfg) if sparse else RetrieverSpec.from_cfg(cfg)

"""Query embeddings cached like unit embeddings: a cell's questions are encoded once.

An evaluate cell used to encode its questions on every search (and `retrieve_passages`'s
doubling rounds re-encoded the unsettled ones); a sweep over granularities and budgets encoded
the same questions once per cell. `cache_query_vectors` encodes them once per key into
`<cache>/queries/<retriever>/<key>/vectors.npy` (float32 [questions, dim], what the query
encoder gives and faiss searches: never the units' storage dtype) and hands each dense searcher
of the cell a `QueryVectors` lookup, so searching reads the memory-mapped rows instead of
encoding. The key is (SHA-256 of the question texts in order, their count, the retriever's
query side: `RetrieverSpec.cache_fields("query")` and the query model's `model_fingerprint`):
not the units, granularity, late chunking or the document encoder, so every cell of a sweep
on one dataset and retriever shares one encoding. The `.npy` is written atomically and its
manifest (count, dim, key inputs, size + content hash) last; both are verified before reuse,
a damaged file is reported and re-encoded or refused (`cache.on_damaged`), and concurrent
cells encode once (`utils.locks.build_once`). BM25 and hash retrievers encode nothing here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from densex.retrieval.build import DenseSearcher, dense_searchers
from densex.retrieval.encoders import DenseRetriever
from densex.retrieval.runtimes import model_fingerprint
from densex.retrieval.search import QUERY_CHUNK
from densex.utils.cache import artifact_dir, content_key
from densex.utils.integrity import file_record, handle_damage, remove_orphans, verify_files
from densex.utils.io import DataError, atomic_open, read_json, write_manifest
from densex.utils.locks import build_once
from densex.utils.logging import get_logger
from densex.utils.models import resolve_model
from densex.utils.progress import Progress

log = get_logger(__name__)

__all__ = ["QueryVectors", "cache_query_vectors", "queries_dir", "queries_sha256"]

VECTORS = "vectors.npy"


class QueryVectors:
    """Cached query embeddings of one question list, looked up by text.

    `lookup(queries)` gives the float32 rows of those texts (any subset, any order, repeats
    allowed) or None when one of them is not among the cached questions. The index is two
    int64 arrays (text hash, sorted; row), no Python object per question."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        if len(texts) != len(vectors):
            raise ValueError(f"{len(texts)} questions for {len(vectors)} vectors")
        self.texts, self.vectors = texts, vectors
        hashes = _hashes(texts)
        self._rows = np.argsort(hashes, kind="stable")
        self._sorted = hashes[self._rows]

    def lookup(self, queries: Sequence[str]) -> np.ndarray | None:
        """float32 [len(queries), dim], or None when a text is not cached."""
        if not len(self._sorted):
            return None
        wanted = _hashes(queries)
        pos = np.minimum(np.searchsorted(self._sorted, wanted), len(self._sorted) - 1)
        if not np.array_equal(self._sorted[pos], wanted):
            return None
        rows = self._rows[pos]
        if any(self.texts[r] != q for r, q in zip(rows.tolist(), queries)):
            return None  # a hash collision: encode instead
        return np.asarray(self.vectors[rows], dtype=np.float32)


def _hashes(texts: Sequence[str]) -> np.ndarray:
    return np.fromiter(map(hash, texts), dtype=np.int64, count=len(texts))


def queries_sha256(texts: Sequence[str]) -> str:
    """SHA-256 of the texts in order (each UTF-8, length-prefixed: no separator ambiguity)."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def key_inputs(texts: Sequence[str], spec: Any) -> dict[str, Any]:
    """What the query embeddings are made from: the texts' hash and count, the retriever's
    query side and its query model's fingerprint (the weights' hashes, memoised per process)."""
    return {
        "questions_sha256": queries_sha256(texts),
        "count": len(texts),
        "retriever": spec.cache_fields("query"),
        "query_model": model_fingerprint(resolve_model(str(spec.query_model))),
    }


def queries_dir(cache_dir: str | Path, spec: Any, inputs: dict[str, Any]) -> Path:
    """`<cache>/queries/<retriever>/<key>` of `key_inputs`."""
    return artifact_dir(cache_dir, "queries", spec.name, key=content_key(**inputs))


def cache_query_vectors(searcher: Any, texts: Sequence[str], cache_dir: str | Path) -> int:
    """Give every dense (not hash) searcher in `searcher` (unions and fusion members too) the
    cached embeddings of `texts`, encoded once per key with its query encoder. Returns the
    number of questions encoded here (0 when every key was cached)."""
    by_key: dict[Path, QueryVectors] = {}
    encoded = 0
    for s in _cacheable(searcher):
        inputs = key_inputs(texts, s.retriever.spec)
        out = queries_dir(cache_dir, s.retriever.spec, inputs)
        if out not in by_key:
            vectors, n = _load_or_encode(out, s.retriever, texts, inputs)
            by_key[out], encoded = QueryVectors(texts, vectors), encoded + n
        s.query_vectors = by_key[out].lookup
    return encoded


def _cacheable(searcher: Any) -> Iterator[DenseSearcher]:
    for s in dense_searchers([searcher]):
        if s.retriever.spec.type == "dense":
            yield s


def _load_or_encode(
    out: Path, retriever: DenseRetriever, texts: Sequence[str], inputs: dict[str, Any]
) -> tuple[np.ndarray, int]:
    """(memory-mapped vectors, questions encoded here) of `out`, built once across processes."""
    remove_orphans(out)
    encoded: list[int] = []

    def build() -> np.ndarray:
        encoded.append(len(texts))
        return _encode_to_dir(out, retriever, texts, inputs)

    vectors = build_once(out, "query embeddings", lambda: _reuse(out, inputs), build)
    if not encoded:
        log.info("reusing %d cached query embeddings of %s: %s", len(texts), out.parent.name, out)
    return vectors, sum(encoded)


def _reuse(out: Path, inputs: dict[str, Any]) -> np.ndarray | None:
    """The verified vectors of `out` (memory-mapped), or None; damaged files are reported and
    removed (`cache.on_damaged=rebuild`: encoded again) or refused (`refuse`: a
    `DamagedArtifact` naming the file)."""
    if not (out / "manifest.json").exists():
        return None
    vectors, problems = _verified(out, inputs)
    if problems:
        handle_damage(problems, "query embeddings", f"rebuild: rm -r {out}")
        (out / "manifest.json").unlink(missing_ok=True)
        (out / VECTORS).unlink(missing_ok=True)
        return None
    return vectors


def _verified(out: Path, inputs: dict[str, Any]) -> tuple[np.ndarray | None, list[Any]]:
    """(memmap, []) when the manifest is of `inputs` and the file matches its size, content
    hash (`cache.verify`), shape and dtype; else (None, [(file, why), ...])."""
    manifest, path = out / "manifest.json", out / VECTORS
    try:
        man = read_json(manifest)
    except DataError as e:
        return None, [(manifest, e.message)]
    if not man.get("complete") or any(man.get(k) != v for k, v in inputs.items()):
        return None, [(manifest, "not the manifest of these questions and query encoder")]
    problems = verify_files(out, {VECTORS: (man.get("records") or {}).get(VECTORS)})
    if problems:
        return None, problems
    try:
        arr = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as e:
        return None, [(path, f"not a readable .npy ({e})")]
    if arr.shape != (man["count"], man["dim"]) or arr.dtype != np.float32:
        return None, [
            (path, f"{arr.shape} {arr.dtype}, manifest says {man['count']} x {man['dim']}")
        ]
    return arr, []


def _encode_to_dir(
    out: Path, retriever: DenseRetriever, texts: Sequence[str], inputs: dict[str, Any]
) -> np.ndarray:
    """Encode `texts` in chunks into `out/vectors.npy` (atomic), then the manifest; memmap."""
    (out / "manifest.json").unlink(missing_ok=True)  # stale: not complete until rewritten
    name = retriever.spec.name
    log.info("encoding %d questions with %s (query embeddings cached in %s)", len(texts), name, out)
    with (
        atomic_open(out / VECTORS, "wb") as f,
        Progress(f"encode questions ({name})", total=len(texts), unit="queries") as bar,
    ):
        dim = _write_rows(f, retriever, texts, bar)
    write_manifest(
        out / "manifest.json",
        kind="query_embeddings",
        complete=True,
        **inputs,
        dim=dim,
        dtype="float32",
        records={VECTORS: file_record(out / VECTORS)},
    )
    return np.load(out / VECTORS, mmap_mode="r")


def _write_rows(f: IO[bytes], retriever: DenseRetriever, texts: Sequence[str], bar: Any) -> int:
    """The .npy header (once the first chunk gives the dim) and every chunk's float32 rows;
    chunks of `QUERY_CHUNK`, as search encoded them. Returns the dim."""
    dim = -1
    for start in range(0, max(len(texts), 1), QUERY_CHUNK):
        chunk = np.ascontiguousarray(
            retriever.encode_queries(list(texts[start : start + QUERY_CHUNK])), dtype=np.float32
        )
        if start == 0:
            dim = int(chunk.shape[1])
            descr = np.lib.format.dtype_to_descr(np.dtype(np.float32))
            header = {"descr": descr, "fortran_order": False, "shape": (len(texts), dim)}
            np.lib.format.write_array_header_1_0(f, header)
        f.write(chunk.tobytes())
        bar.advance(len(chunk))
    return dim

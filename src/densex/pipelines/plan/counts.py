"""Unit counts of the configured corpus for `index.py stage=plan`, without building anything.

Contract: `corpus_units(corpus, cache_dir)` gives, per granularity, `{count, bytes_per_unit,
avg_words, source}` from the corpus's built units cache (`units_dir_for`: the same inputs and
settings), else a sample of its input files (read in full only to count lines), else its
`expected_units` (+ `expected_avg_words`, Table 1 for `corpus=factoid-wiki`).
`sampled_bytes_per_word` gives the text's bytes per word the same way (else assumed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from densex.corpus.spec import GRANULARITIES
from densex.corpus.units_key import units_dir_for
from densex.pipelines.edge import corpus_spec
from densex.pipelines.plan.sizes import FACTOID_WIKI, UNIT_OVERHEAD_BYTES
from densex.utils.config import plain_data

# assumed when no local text can be sampled: English Wikipedia text, UTF-8: ~5.1 characters
# per word + a space
BYTES_PER_WORD = 6.1


def _sample_jsonl(path: Path, lines: int = 2000) -> list[dict]:
    rows = []
    with path.open("rb") as f:
        for raw in f:
            if len(rows) >= lines:
                break
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _count_lines(path: Path, chunk: int = 16 << 20) -> int:
    n = 0
    with path.open("rb") as f:
        while block := f.read(chunk):
            n += block.count(b"\n")
    return n


def _words(text: Any) -> int:
    return len(str(text).split())


def _from_units_cache(corpus: Mapping[str, Any], cache_dir: Path) -> dict[str, dict] | None:
    """Counts and bytes per unit of this corpus's built units dir (`units_dir_for`: the same
    inputs and settings), when it exists."""
    try:
        unit_dir = Path(units_dir_for(corpus_spec(corpus), cache_dir))
    except Exception:  # noqa: BLE001 - no input to key by (e.g. a hub collection): not built
        return None
    for manifest in [unit_dir / "manifest.json"]:
        if not manifest.is_file():
            continue
        try:
            m = json.loads(manifest.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        units = m.get("units") or {}
        out = {}
        for g in GRANULARITIES:
            count = (units.get(g) or {}).get("count")
            files = [p for p in manifest.parent.iterdir() if p.name.split(".")[0] == g]
            if not count or not files:
                continue
            size = sum(p.stat().st_size for p in files)
            out[g] = {
                "count": int(count),
                "bytes_per_unit": size / count,
                "avg_words": (units.get(g) or {}).get("avg_words"),
                "source": f"units cache {manifest.parent.name}",
            }
        if out:
            return out
    return None


def _from_inputs(corpus: Mapping[str, Any]) -> dict[str, dict]:
    """Counts and bytes per unit from the corpus's input files (passages + propositions JSONL),
    read in full only to count lines; sentences estimated at Table 1's 21 words each."""
    out: dict[str, dict] = {}
    passages = corpus.get("passages")
    if not passages or not Path(str(passages)).is_file():
        return out
    ppath = Path(str(passages))
    sample = _sample_jsonl(ppath)
    if not sample:
        return out
    n_pass = _count_lines(ppath)
    words = sum(_words(r.get("text", "")) for r in sample) / len(sample)
    text_bytes = sum(len(str(r.get("text", "")).encode()) for r in sample)
    bpw = text_bytes / max(1, sum(_words(r.get("text", "")) for r in sample))
    source = f"sampled {ppath.name}"
    out["passage"] = {"count": n_pass, "avg_words": words, "bytes_per_word": bpw,
                      "bytes_per_unit": ppath.stat().st_size / max(n_pass, 1), "source": source}  # fmt: skip
    n_sent = round(n_pass * words / FACTOID_WIKI["sentence"][1])
    out["sentence"] = {"count": n_sent, "avg_words": FACTOID_WIKI["sentence"][1],
                       "bytes_per_unit": UNIT_OVERHEAD_BYTES + bpw * FACTOID_WIKI["sentence"][1],
                       "source": f"estimated from {ppath.name}"}  # fmt: skip
    props = corpus.get("propositions")
    if props and Path(str(props)).is_file():
        prow = _sample_jsonl(Path(str(props)))
        texts = [p for r in prow for p in (r.get("propositions") or []) if isinstance(p, str)]
        if prow and texts:
            per_passage = len(texts) / len(prow)
            pw = sum(_words(t) for t in texts) / len(texts)
            out["proposition"] = {
                "count": round(n_pass * per_passage),
                "avg_words": pw,
                "bytes_per_unit": UNIT_OVERHEAD_BYTES
                + sum(len(t.encode()) for t in texts) / len(texts),
                "source": f"sampled {Path(str(props)).name}",
            }
    return out


def sampled_bytes_per_word(corpus: Mapping[str, Any]) -> tuple[float, str]:
    """Bytes per word of the corpus's text from a sample of a local passages file or
    collection, else `BYTES_PER_WORD` (assumed)."""
    candidates = [corpus.get("passages")]
    sources = corpus.get("sources") or {}
    candidates += [(sources.get(g) or {}).get("path") for g in GRANULARITIES]
    for cand in candidates:
        if not cand:
            continue
        path = Path(os.path.expanduser(str(cand)))
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.jsonl"))
            path = files[0] if files else path
        if not path.is_file():
            continue
        texts = [str(r.get("text") or r.get("contents") or "") for r in _sample_jsonl(path)]
        words = sum(_words(t) for t in texts)
        if words:
            return sum(len(t.encode()) for t in texts) / words, f"sampled {path.name}"
    return BYTES_PER_WORD, "assumed"


def corpus_units(corpus: Mapping[str, Any], cache_dir: str | os.PathLike) -> dict[str, dict]:
    """Per granularity `{count, bytes_per_unit, avg_words, source}` of the configured corpus:
    its units cache, else its input files, else `expected_units` (+ `expected_avg_words`)."""
    corpus = dict(plain_data(corpus) or {})
    found = _from_units_cache(corpus, Path(cache_dir)) or _from_inputs(corpus)
    expected = corpus.get("expected_units") or {}
    avg_words = corpus.get("expected_avg_words") or {}
    bpw, bpw_source = sampled_bytes_per_word(corpus)
    for g in GRANULARITIES:
        if g in found or not expected.get(g):
            continue
        words = float(avg_words.get(g) or FACTOID_WIKI[g][1])
        found[g] = {
            "count": int(expected[g]),
            "avg_words": words,
            "bytes_per_unit": UNIT_OVERHEAD_BYTES + bpw * words,
            "source": f"expected_units; bytes/word {bpw_source}",
        }
    return found

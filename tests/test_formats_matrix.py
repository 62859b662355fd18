"""Every documented input format through the CLI, preflight on (issue 24).

Each test runs the documented command for one input (docs/formats.md, read
by `helpers.formats.readme_command`) with the README's placeholders filled by tiny data the
test writes in the shipped layout (from the shared squad-open and QA files), plus only the
overrides that keep it cheap and isolated (`paths.data_dir`, `paths.cache_dir`, the run dir;
`corpus=demo retriever=bm25` for the question sets), and asserts the counts the stage read.
The entry scripts run in this process (`runpy`, argv as on the command line: Hydra, the
preflight and the stage as a user runs them; ~1 s a run instead of ~12 s of imports),
none of them as a subprocess (`test_untrusted_bytes` runs one, for the exit status and the
one stderr line a user sees).
Preflight reads each input through the stage's own reader (`corpus.sources`,
`data.questions`), so a format missing from that dispatch fails its test here.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from helpers.formats import (
    fill,
    jsonl,
    read_jsonl,
    readme_command,
    run_cli,
    squad_subset,
    write_beir,
)

REPO = Path(__file__).resolve().parents[1]
N_ARTICLES = 3  # squad-open's first 3 articles: 228 passages, 696 questions
N_QUESTIONS = 12  # records taken from each shipped question file


def units_manifest(cache: Path) -> dict[str, Any]:
    (manifest,) = cache.glob("units/*/*/manifest.json")
    return json.loads(manifest.read_text(encoding="utf-8"))


def unit_ids(cache: Path, name: str = "passages.jsonl") -> list[str]:
    (path,) = cache.glob(f"units/*/*/{name}")
    return [r["id"] for r in read_jsonl(path)]


@pytest.fixture(scope="module")
def data(shared_data: Path, squad_open: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`DATA`: a `paths.data_dir` in the shared layout with a squad-open subset and the first
    records of each shipped question file; plus the counts they hold."""
    root = tmp_path_factory.mktemp("formats")
    data_dir = root / "data"
    sub = squad_subset(squad_open, N_ARTICLES)
    so = data_dir / "squad-open"
    so.mkdir(parents=True)
    (so / "squad-dev-v1.1.json").write_text(json.dumps(sub["squad"]), encoding="utf-8")
    jsonl(so / "passages.jsonl", sub["passages"])
    jsonl(so / "propositions.jsonl", sub["propositions"])
    jsonl(so / "questions.jsonl", sub["questions"])
    counts = {"dpr-tsv-quoted": 20, "entity-questions": 2 * 5}
    for rel in ("nq/nq-test.dpr.tsv", "nq/NQ-open.dev.jsonl", "webq/wq-test.dpr.jsonl",
                "curated/curated-test.dpr.jsonl", "squad/squad-test.dpr.jsonl"):  # fmt: skip
        lines = (shared_data / "qa" / rel).read_bytes().splitlines(keepends=True)[:N_QUESTIONS]
        (data_dir / "qa" / rel).parent.mkdir(parents=True, exist_ok=True)
        (data_dir / "qa" / rel).write_bytes(b"".join(lines))
    tqa = (shared_data / "qa/tqa/trivia-test.dpr.tsv").read_bytes().splitlines(keepends=True)
    (data_dir / "qa/tqa").mkdir(parents=True)
    (data_dir / "qa/tqa/trivia-test.dpr.tsv").write_bytes(b"".join(tqa[:20]))  # 2 CSV-quoted
    brmson = json.loads((shared_data / "qa/webq/webquestions-test.brmson.json").read_bytes())
    path = data_dir / "qa/webq/webquestions-test.brmson.json"
    path.write_text(json.dumps(brmson[:N_QUESTIONS]), encoding="utf-8")
    (data_dir / "qa/eq").mkdir(parents=True)
    for relation in ("P106", "P17"):
        items = json.loads((shared_data / f"qa/eq/{relation}.test.json").read_bytes())[:5]
        (data_dir / f"qa/eq/{relation}.test.json").write_text(json.dumps(items), "utf-8")
    n_props = sum(len(r["propositions"]) for r in sub["propositions"])
    return {"root": root, "dir": data_dir, "subset": sub, "counts": counts, "n_props": n_props}


# -- corpora: index.py stage=units ----------------------------------------------------------


def _units(tmp_path: Path, fmt: str, data_dir: Path | None = None, **values: str) -> Path:
    cache = tmp_path / "cache"
    extra = [f"paths.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}"]
    if data_dir is not None:
        extra.append(f"paths.data_dir={data_dir}")
    assert run_cli(fill(readme_command(fmt), **values), *extra) == 0
    return cache


def test_demo(tmp_path: Path) -> None:
    cache = _units(tmp_path, "demo")
    m = units_manifest(cache)
    props = read_jsonl(REPO / "data/demo/propositions.jsonl")
    assert m["units"]["passage"]["count"] == len(read_jsonl(REPO / "data/demo/passages.jsonl"))
    assert m["units"]["proposition"]["count"] == sum(len(r["propositions"]) for r in props)
    assert m["units"]["sentence"]["count"] > m["units"]["passage"]["count"]
    assert m["skipped"]["total"] == 0


def test_squad_open_passages_and_propositions(tmp_path: Path, data: dict) -> None:
    cache = _units(tmp_path, "squad-open", data["dir"])
    m = units_manifest(cache)
    assert m["units"]["passage"]["count"] == len(data["subset"]["passages"]) == 228
    assert m["units"]["proposition"]["count"] == data["n_props"]
    assert unit_ids(cache) == [p["id"] for p in data["subset"]["passages"]]


def test_squad_json_documents(tmp_path: Path, data: dict) -> None:
    """SQuAD JSON paragraphs segmented into 100-word passages: the shipped chunks again."""
    cache = _units(tmp_path, "squad-json-documents", data["dir"])
    m = units_manifest(cache)
    assert "documents" in m["inputs"]
    assert unit_ids(cache) == [p["id"] for p in data["subset"]["passages"]]
    assert m["units"]["proposition"]["count"] == data["n_props"]  # ids match the chunks


def _pyserini(subset: dict) -> tuple[list[dict], list[dict]]:
    passages = [
        {"id": p["id"], "contents": f"{p['title']}\n{p['text']}"} for p in subset["passages"]
    ]
    title = {p["id"]: p["title"] for p in subset["passages"]}
    props = [
        {"id": f"{r['id']}::p{i}", "contents": f"{title[r['id']]}\n{text}"}
        for r in subset["propositions"]
        for i, text in enumerate(r["propositions"])
    ]
    return passages, props


def _check_collection(cache: Path, data: dict) -> None:
    m = units_manifest(cache)
    assert m["units"]["passage"]["count"] == 228
    assert m["units"]["proposition"]["count"] == data["n_props"]
    assert m["units"]["sentence"]["count"] > 228  # split from the collection's passages
    assert m["skipped"]["total"] == 0
    assert unit_ids(cache) == [p["id"] for p in data["subset"]["passages"]]


def test_pyserini_jsonl_collection(tmp_path: Path, data: dict) -> None:
    passages, props = _pyserini(data["subset"])
    p, q = jsonl(tmp_path / "passages.jsonl", passages), jsonl(tmp_path / "props.jsonl", props)
    cache = _units(tmp_path, "pyserini-jsonl", PASSAGES=str(p), PROPOSITIONS=str(q))
    _check_collection(cache, data)


def test_directory_of_jsonl_gz_shards(tmp_path: Path, data: dict) -> None:
    passages, props = _pyserini(data["subset"])
    root = tmp_path / "collection"
    for name, rows in (("passage", passages), ("proposition", props)):
        third = len(rows) // 3 + 1
        for s in range(3):
            jsonl(root / name / f"part-{s:02d}.jsonl.gz", rows[s * third : (s + 1) * third])
    cache = _units(tmp_path, "jsonl-gz-shards", DIR=str(root))
    _check_collection(cache, data)


def test_save_to_disk_documents(tmp_path: Path, data: dict) -> None:
    """A `datasets.save_to_disk` directory of articles (paragraphs joined by newlines), the
    layout of `corpus=wikipedia-hf`: the same 100-word passages as the SQuAD paragraphs."""
    import datasets

    rows = [
        {"title": a["title"].replace("_", " "), "text": "\n".join(p["context"] for p in a["paragraphs"])}
        for a in data["subset"]["squad"]["data"]
    ]  # fmt: skip
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(saved))
    cache = _units(tmp_path, "save-to-disk", DIR=str(saved))
    assert unit_ids(cache) == [p["id"] for p in data["subset"]["passages"]]
    assert "proposition" not in units_manifest(cache)["units"]


# -- BEIR: the documented sweep command (docs/formats.md) (a multirun: table2.md from its callback) -----------------------------------------


def _pytrec(retrieval: Path, qrels_path: Path) -> dict[str, float]:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels: dict[str, dict[str, int]] = {}
    for i, line in enumerate(qrels_path.read_text(encoding="utf-8").splitlines()):
        if i:  # header
            q, d, rel = line.split("\t")
            qrels.setdefault(q, {})[d] = int(rel)
    with gzip.open(retrieval, "rt", encoding="utf-8") as f:
        rows = json.load(f)
    run = {r["id"]: {c["id"]: float(c["score"]) for c in r["ctxs"]} for r in rows}
    top10 = {q: dict(sorted(d.items(), key=lambda x: -x[1])[:10]) for q, d in run.items()}
    ndcg = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    return {
        "ndcg@10": 100 * sum(v["ndcg_cut_10"] for v in ndcg.values()) / len(ndcg),
        "mrr@10": 100 * sum(v["recip_rank"] for v in rr.values()) / len(rr),
    }


def test_beir_directory_readme_command(tmp_path: Path, data: dict) -> None:
    beir = write_beir(tmp_path / "beir", data["subset"])
    sweep = tmp_path / "sweep"
    words = fill(readme_command("beir"), DIR=str(beir))
    assert run_cli(words, f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}") == 0
    cell = next(sweep.glob("0_*"))  # cell folders name their overrides
    (row,) = read_jsonl(cell / "results.jsonl")
    assert row["n_questions"] == len(data["subset"]["questions"]) == 696
    undefined = [k for k in row if k.startswith(("recall@", "answer_recall@", "em@"))]
    assert undefined == [], undefined  # BEIR queries have no answer strings
    metrics = [k for k in row if "@" in k]
    assert metrics[:2] == ["ndcg@10", "mrr@10"]  # the gold metrics lead the row
    ref = _pytrec(cell / "retrieval.json.gz", beir / "qrels" / "test.tsv")
    for key in ("ndcg@10", "mrr@10"):
        assert math.isclose(row[key], ref[key], abs_tol=0.01), (key, row[key], ref[key])
    assert 50 < row["ndcg@10"] < 100  # BM25 on SQuAD's own paragraphs finds most gold chunks
    table = (sweep / "table2.md").read_text(encoding="utf-8")
    assert "beir nDCG@10" in table and "beir MRR@10" in table and "beir R@5" not in table
    assert f"| {row['ndcg@10']:.1f} | {row['mrr@10']:.1f} |" in table


# -- question sets: evaluate.py, one cell on the demo corpus with BM25 ----------------------


QUESTION_SETS = {
    "dpr-tsv": N_QUESTIONS,
    "dpr-tsv-quoted": 20,
    "nq-open": N_QUESTIONS,
    "dpr-jsonl": N_QUESTIONS,
    "webq-brmson": N_QUESTIONS,
    "curated-regex": N_QUESTIONS,
    "entity-questions": 10,
}


@pytest.fixture(scope="module")
def demo_cache(data: dict) -> Path:
    return data["root"] / "demo-cache"  # the demo units + BM25 index, built once


def _cell(tmp_path: Path, fmt: str, data: dict, cache: Path, *extra: str) -> dict[str, Any]:
    run = tmp_path / "run"
    args = [f"paths.data_dir={data['dir']}", f"paths.cache_dir={cache}", f"hydra.run.dir={run}",
            *extra]  # fmt: skip
    assert run_cli(readme_command(fmt), *args) == 0
    (row,) = read_jsonl(run / "results.jsonl")
    return row


@pytest.mark.parametrize("fmt", list(QUESTION_SETS))
def test_question_formats(tmp_path: Path, data: dict, demo_cache: Path, fmt: str) -> None:
    row = _cell(tmp_path, fmt, data, demo_cache, "corpus=demo", "retriever=bm25")
    assert row["n_questions"] == QUESTION_SETS[fmt]
    assert row["n_questions_skipped"] == 0
    assert 0.0 <= row["recall@100"] <= 100.0  # answer strings: has_answer recall is defined
    ids = [r["id"] for r in read_jsonl(tmp_path / "run" / "per_question.jsonl")]
    assert len(set(ids)) == len(ids) == QUESTION_SETS[fmt]
    if fmt == "entity-questions":
        assert sorted({i.rsplit("-", 1)[0] for i in ids}) == ["eq-P106", "eq-P17"]


def test_squad_json_questions(tmp_path: Path, data: dict, demo_cache: Path) -> None:
    row = _cell(tmp_path, "squad-json-questions", data, demo_cache, "corpus=demo",
                "retriever=bm25")  # fmt: skip
    ids = [r["id"] for r in read_jsonl(tmp_path / "run" / "per_question.jsonl")]
    assert ids == [q["id"] for q in data["subset"]["questions"]]  # SQuAD's own qa ids
    assert row["n_questions"] == 696


def test_squad_open_questions_keep_answer_and_gold_metrics(tmp_path: Path, data: dict) -> None:
    """Answers and qrels (SQuAD's gold chunks): both kinds of metric, recall@k leading."""
    row = _cell(tmp_path, "squad-open-questions", data, tmp_path / "cache", "corpus=squad-open",
                "retriever=bm25")  # fmt: skip
    assert row["n_questions"] == 696
    metrics = [k for k in row if "@" in k]
    assert metrics[0] == "recall@1" and "ndcg@10" in row and "answer_recall@100" in row
    assert row["n_gold_questions"] == 696

"""The Python search API (`densex.open_index`) on the real demo index: the same passages and
scores as `evaluate.py`'s retrieval files, units placed inside their passages."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from densex.pipelines.search.compose import granularity_argv, split_granularities
from helpers.demo_sweep import GRANULARITIES
from helpers.env import subprocess_env


def _sweep_cell(sweep, granularity: str):
    for job in sorted(p for p in sweep.iterdir() if (p / "results.jsonl").is_file()):
        row = json.loads((job / "results.jsonl").read_text())
        if row["granularity"] == granularity:
            return job
    raise AssertionError(f"no {granularity} cell in {sweep}")


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_api_returns_the_passages_and_scores_evaluate_wrote(demo_sweep, demo_index, granularity):
    sweep, _ = demo_sweep
    with gzip.open(_sweep_cell(sweep, granularity) / "retrieval.json.gz", "rt") as f:
        written = json.load(f)
    k = len(written[0]["ctxs"])
    hits = demo_index.search([q["question"] for q in written], k, granularity)
    assert len(hits) == len(written) > 0
    for q, got in zip(written, hits):
        assert [h.id for h in got] == [c["id"] for c in q["ctxs"]], q["question"]
        want = np.array([float(c["score"]) for c in q["ctxs"]], dtype=np.float32)
        # the same float32 scores up to the last bit or two: the query encoder's batch and
        # thread count differ between the sweep's process and this one
        np.testing.assert_allclose(
            np.array([h.score for h in got], dtype=np.float32), want, rtol=1e-6, atol=1e-7
        )


def test_hits_carry_the_units_that_scored_them(demo_index):
    q = "In what year did Kessingbury receive its royal charter?"
    for g, (hits,) in demo_index.compare([q], 3).items():
        assert len(hits) == 3
        for h in hits:
            assert h.units and h.units[0].score == pytest.approx(h.score, abs=1e-6)
            assert [u.score for u in h.units] == sorted((u.score for u in h.units), reverse=True)
            for u in h.units:
                assert u.id == h.id if g == "passage" else u.id.startswith(h.id + "::")
                start, end = u.span
                if g != "proposition":  # passages and sentences are exact substrings
                    assert h.text[start:end] == u.text.strip()
    (top,) = demo_index.search([q], 1, "proposition")[0]
    start, end = top.units[0].span
    assert "1312" in top.units[0].text and "1312" in top.text[start:end]
    assert demo_index.answers(q.upper()) == ["1312"]
    assert demo_index.answers("not a benchmark question") is None


def test_unknown_granularity_is_named(demo_index):
    with pytest.raises(KeyError, match="unknown granularity 'word'"):
        demo_index.search(["q"], 1, "word")


def test_split_granularities():
    assert split_granularities(["corpus=demo", "granularity=passage,proposition"]) == (
        ["passage", "proposition"], ["corpus=demo"])  # fmt: skip
    assert split_granularities(["corpus=demo"]) == (None, ["corpus=demo"])
    with pytest.raises(ValueError, match="twice"):
        split_granularities(["granularity=passage", "granularity=sentence"])
    assert granularity_argv(["serve.py", "granularity=passage,proposition", "corpus=demo"]) == [
        "serve.py", "granularity=passage", "serve.granularities=[passage,proposition]",
        "corpus=demo"]  # fmt: skip
    assert granularity_argv(["serve.py", "granularity=sentence"]) == [
        "serve.py",
        "granularity=sentence",
    ]


def test_import_densex_stays_light(repo_root):
    code = "import sys, densex; print('torch' in sys.modules, 'hydra' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), cwd=repo_root,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.split() == ["False", "False"]
    import densex

    assert callable(densex.open_index)
    with pytest.raises(AttributeError, match="no attribute 'open_indx'"):
        densex.open_indx  # noqa: B018


def test_opening_reads_no_unit_text_and_a_search_only_its_hits(demo_sweep, monkeypatch):
    import densex
    from densex.corpus.columnar import ArrowTable

    reads: list[tuple[str, int]] = []
    take, slice_, iter_rows = ArrowTable.take, ArrowTable.slice, ArrowTable.iter_rows

    def spy_take(self, column, rows):
        reads.append((column, len(rows)))
        return take(self, column, rows)

    monkeypatch.setattr(ArrowTable, "take", spy_take)
    monkeypatch.setattr(ArrowTable, "slice", lambda *a: reads.append(("slice", -1)) or slice_(*a))
    monkeypatch.setattr(
        ArrowTable, "iter_rows", lambda *a, **k: reads.append(("rows", -1)) or iter_rows(*a, **k)
    )
    _, cache = demo_sweep
    ix = densex.open_index("corpus=demo", "dataset=demo", "retriever=minilm", "trainer=cpu",
                           f"paths.cache_dir={cache}", "granularity=proposition")  # fmt: skip
    assert reads == []  # passage_row and words only (NumPy columns); no text, no ids
    (hits,) = ix.search(["Who owned the last ropewalk?"], 2, units_per_passage=2)
    assert sorted(c for c, _ in reads) == ["id", "id", "text", "text", "title"]
    assert all(n <= 4 for _, n in reads)  # 2 passages, at most 2 units each
    assert len(hits) == 2


@pytest.mark.parametrize("verify", ["true", "false"])
def test_opening_reads_no_units_file_and_shares_one_query_encoder(demo_sweep, monkeypatch, verify):
    """Opening the three cached demo granularities in a fresh process finds each cell's
    embeddings by the SHA-256 and line count the units manifest recorded: the units files are
    never hashed or counted, and with `cache.verify=false` (no re-hash of the artifacts)
    never opened at all, not even by the searches. The three cells share one query encoder."""
    import builtins
    from pathlib import Path

    import densex
    from densex.corpus import units_digest as digest_mod
    from densex.retrieval.build import DenseSearcher

    _, cache = demo_sweep
    units_files = {p.resolve() for p in Path(cache, "units").rglob("*.jsonl")}
    assert len(units_files) >= 4  # passages + three granularities
    tried: list[str] = []
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).resolve() in units_files:
            tried.append(str(file))
        return real_open(file, *args, **kwargs)

    def no_digest(path, *args, **kwargs):
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr(digest_mod, "_memo", {})  # what a fresh process remembers
    monkeypatch.setattr(digest_mod, "file_digest", no_digest)
    if verify == "false":
        monkeypatch.setattr(builtins, "open", guarded_open)
    ix = densex.open_index("corpus=demo", "dataset=demo", "retriever=minilm", "trainer=cpu",
                           f"paths.cache_dir={cache}", f"cache.verify={verify}",
                           "granularity=" + ",".join(GRANULARITIES))  # fmt: skip
    results = ix.compare(["Who owned the last ropewalk?"], 2)
    assert tried == [] and all(len(r[0]) == 2 for r in results.values())
    searchers = [ix[g].cell.searcher for g in GRANULARITIES]
    assert all(isinstance(s, DenseSearcher) for s in searchers)
    assert len({id(s.retriever) for s in searchers}) == 1
    assert len({s.index.ntotal for s in searchers}) == 3  # three indexes, one encoder


def test_granularity_and_k_are_said_not_guessed(demo_index):
    with pytest.raises(ValueError, match=r"3 granularities are open \(passage, sentence, "
                                         r"proposition\): name one"):  # fmt: skip
        demo_index.search(["Who owned the last ropewalk?"], 5)
    with pytest.raises(ValueError, match="k=52 is more than the 51 passages of corpus=demo"):
        demo_index.search(["Who owned the last ropewalk?"], 52, "passage")
    assert len(demo_index.search(["Who owned the last ropewalk?"], 51, "passage")[0]) == 51
    both = demo_index.compare(["Who owned the last ropewalk?"], 2, ["proposition", "passage"])
    assert list(both) == ["proposition", "passage"] and all(len(r[0]) == 2 for r in both.values())


def test_serve_dataset_follows_the_corpus():
    """conf/serve.yaml: the benchmark questions are the dataset named like the corpus (none
    when there is none), unless dataset= names another; experiment=demo opens its three."""
    from densex.pipelines.compose import compose_config
    from densex.pipelines.search.compose import compose_configs

    assert compose_config("serve", "corpus=demo").dataset.name == "demo"
    assert compose_config("serve").dataset.name == "squad-open"  # the default corpus's own
    assert "dataset" not in compose_config("serve", "corpus=factoid-wiki")
    assert compose_config("serve", "corpus=demo", "dataset=nq").dataset.name == "nq"
    cfgs = compose_configs(["experiment=demo"])
    assert [c.granularity.name for c in cfgs] == list(GRANULARITIES)
    assert {(c.corpus.name, c.dataset.name, c.retriever.name) for c in cfgs} == {
        ("demo", "demo", "minilm")
    }
    (one,) = compose_configs(["experiment=demo", "granularity=sentence"])
    assert one.granularity.name == "sentence"


def test_experiment_demo_reuses_the_demo_cache_and_its_questions(demo_sweep):
    import densex

    _, cache = demo_sweep
    before = sorted(str(p) for p in cache.rglob("*"))
    ix = densex.open_index("experiment=demo", f"paths.cache_dir={cache}", "trainer=cpu")
    assert list(ix) == list(GRANULARITIES) and ix.dataset == ix.corpus == "demo"
    assert ix.question_problem() is None
    q = "In what year did Kessingbury receive its royal charter?"
    assert ix.answers(q) == ["1312"]
    (hits,) = ix.search([q], 5, "proposition")
    assert ix.first_answer_rank(hits, ["1312"]) == 1
    assert len(ix.examples(5)) == 5 and all(e["answers"] for e in ix.examples(5))
    assert sorted(str(p) for p in cache.rglob("*")) == before  # nothing built or rewritten


def test_question_problem_says_when_no_question_can_match(demo_sweep, squad_open):
    import densex

    _, cache = demo_sweep
    common = ("corpus=demo", "retriever=minilm", "trainer=cpu", f"paths.cache_dir={cache}",
              "granularity=passage")  # fmt: skip
    none = densex.open_index(*common, "~dataset")
    assert none.dataset is None and none.answers("Who owned the last ropewalk?") is None
    assert none.question_problem().startswith("no benchmark questions")
    other = densex.open_index(*common, "dataset=squad-open")
    problem = other.question_problem()
    assert problem.startswith("dataset=squad-open does not match corpus=demo: none of 20")

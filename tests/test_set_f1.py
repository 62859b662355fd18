"""BERTScore set-F1: the batched scorer against bert-score itself, on real propositions."""

from __future__ import annotations

import json

import pytest
import torch

from densex.metrics import set_f1 as set_f1_mod
from densex.metrics.set_f1 import SetF1Scorer, naive_set_f1, set_scores


@pytest.fixture(scope="module")
def scorer(minilm_path) -> SetF1Scorer:
    torch.set_num_threads(1)
    return SetF1Scorer(minilm_path, num_layers=6, batch_size=32, lang=None, device="cpu")


@pytest.fixture(scope="module")
def gold_sets(squad_open) -> list[list[str]]:
    with (squad_open / "propositions.jsonl").open(encoding="utf-8") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    return [r["propositions"][:5] for r in rows]  # 5 each keeps the per-pair reference quick


def perturb(props: list[str]) -> list[str]:
    """Drop every third proposition, reword the rest a little, add one unrelated proposition."""
    kept = [p for i, p in enumerate(props) if i % 3 != 1]
    return [p.replace("The ", "A ").replace(" was ", " had been ") for p in kept] + [
        "Bananas are rich in potassium."
    ]


def test_identical_sets_score_one(scorer, gold_sets):
    result = scorer.score(gold_sets, gold_sets)
    assert result.f1 == pytest.approx(1.0, abs=1e-5)
    assert result.precision == pytest.approx(1.0, abs=1e-5)
    assert result.recall == pytest.approx(1.0, abs=1e-5)
    assert result.parse_rate == 1.0 and result.n_unparsed == 0
    assert result.props_per_passage_gold == result.props_per_passage_pred
    assert result.props_per_passage_gold == sum(map(len, gold_sets)) / len(gold_sets)


def test_matches_bert_score_on_every_pair(scorer, gold_sets):
    preds = [perturb(g) for g in gold_sets]
    result = scorer.score(preds, gold_sets)
    reference = naive_set_f1(scorer.bert, preds, gold_sets)
    for ours, (p, r, f) in zip(result.per_passage, reference):
        assert ours["precision"] == pytest.approx(p, abs=1e-4)
        assert ours["recall"] == pytest.approx(r, abs=1e-4)
        assert ours["f1"] == pytest.approx(f, abs=1e-4)
    assert 0.5 < result.f1 < 0.999  # a real, imperfect match
    assert result.f1 == pytest.approx(sum(f for _, _, f in reference) / len(reference), abs=1e-4)


def test_pairwise_matrix_is_bert_score_f1(scorer, gold_sets):
    preds, golds = perturb(gold_sets[0])[:3], gold_sets[0][:4]
    cache = scorer.embed(preds + golds, scorer._idf_dict(golds))
    ours = scorer.pairwise(preds, golds, cache)
    # bert-score itself, one pair at a time
    f = torch.tensor([[scorer.bert.score([p], [g])[2].item() for g in golds] for p in preds])
    assert ours.shape == (3, 4)
    assert torch.allclose(ours, f, atol=1e-4)
    # BERTScore F1 is symmetric in (candidate, reference)
    assert torch.allclose(ours, scorer.pairwise(golds, preds, cache).T, atol=1e-5)


def test_chunked_pairwise_equals_unchunked(scorer, gold_sets, monkeypatch):
    preds = [perturb(g) for g in gold_sets]
    full = scorer.score(preds, gold_sets)
    monkeypatch.setattr(set_f1_mod, "_MAX_SIM_ELEMENTS", 1)
    chunked = scorer.score(preds, gold_sets)
    assert chunked.f1 == pytest.approx(full.f1, abs=1e-6)


def test_idf_weights_match_bert_score(scorer, gold_sets, monkeypatch):
    from bert_score.utils import get_idf_dict

    preds = [perturb(g) for g in gold_sets]
    all_gold = [s for g in gold_sets for s in g]
    monkeypatch.setattr(scorer, "idf", True)
    ours = scorer.score(preds, gold_sets)
    monkeypatch.setattr(scorer.bert, "_idf", True)
    monkeypatch.setattr(scorer.bert, "_idf_dict", get_idf_dict(all_gold, scorer.bert._tokenizer, 0))
    reference = naive_set_f1(scorer.bert, preds, gold_sets)
    for row, (_, _, f) in zip(ours.per_passage, reference):
        assert row["f1"] == pytest.approx(f, abs=1e-4)


def test_empty_and_unparseable_predictions_score_zero(scorer, gold_sets):
    result = scorer.score([[], None, gold_sets[2]], gold_sets[:3])
    assert [r["f1"] for r in result.per_passage][:2] == [0.0, 0.0]
    assert result.per_passage[2]["f1"] == pytest.approx(1.0, abs=1e-5)
    assert result.f1 == pytest.approx(1 / 3, abs=1e-5)
    assert result.n_unparsed == 1 and result.parse_rate == pytest.approx(2 / 3)
    assert result.props_per_passage_pred == pytest.approx(len(gold_sets[2]) / 3)
    metrics = result.as_dict("val/")
    assert metrics["val/set_f1"] == pytest.approx(result.f1)
    assert {"val/precision", "val/recall", "val/parse_rate"} <= metrics.keys()


def test_set_scores_edge_cases():
    assert set_scores(torch.zeros(0, 0)) == (1.0, 1.0, 1.0)
    assert set_scores(torch.zeros(0, 3)) == (0.0, 0.0, 0.0)
    assert set_scores(torch.zeros(2, 0)) == (0.0, 0.0, 0.0)
    # 2 preds x 2 golds: pred 0 matches gold 0 perfectly; pred 1 is half-similar to both
    p, r, f = set_scores(torch.tensor([[1.0, 0.2], [0.5, 0.5]]))
    assert p == pytest.approx((1.0 + 0.5) / 2)
    assert r == pytest.approx((1.0 + 0.5) / 2)
    assert f == pytest.approx(0.75)


def test_length_mismatch_is_an_error(scorer):
    with pytest.raises(ValueError, match="predictions"):
        scorer.score([["a"]], [])


def test_square_set_pair_equals_bert_score_to_1e6(scorer, squad_open):
    """A 30 x 30 set pair (real propositions of several passages): every pairwise F1 and the
    set scores equal bert-score's own, scored pair by pair (batch_size=1: no padding), to 1e-6
    (`benchmarks/set_f1_bench.py --square 100` times the 100 x 100 case against its batching)."""
    with (squad_open / "propositions.jsonl").open(encoding="utf-8") as f:
        flat = [p for _, line in zip(range(12), f) for p in json.loads(line)["propositions"]]
    golds, preds = flat[:30], perturb(flat[:46])[:30]
    cache = scorer.embed(preds + golds, scorer._idf_dict(golds))
    ours = scorer.pairwise(preds, golds, cache)
    cands, refs = [a for a in preds for _ in golds], [b for _ in preds for b in golds]
    ref = scorer.bert.score(cands, refs, batch_size=1)[2].view(len(preds), len(golds))
    assert torch.allclose(ours, ref, rtol=0, atol=1e-6), (ours - ref).abs().max()
    result = scorer.score([preds], [golds]).per_passage[0]
    for got, want in zip((result["precision"], result["recall"], result["f1"]), set_scores(ref)):
        assert got == pytest.approx(want, abs=1e-6)
    assert 0.5 < result["f1"] < 0.99


def test_a_second_call_embeds_only_what_it_has_not_seen(minilm_path, gold_sets, monkeypatch):
    """Validation scores the same gold every time: the second call embeds only the new
    predictions, scores as a scorer that re-embeds everything does, and keeps only its own
    references (memory: one call's); with idf weights nothing is reused."""
    torch.set_num_threads(1)
    scorer = SetF1Scorer(minilm_path, num_layers=6, batch_size=32, lang=None, device="cpu")
    fresh = SetF1Scorer(minilm_path, num_layers=6, batch_size=32, lang=None, device="cpu",
                        reuse_references=False)  # fmt: skip
    embedded: list[str] = []
    embed = scorer.embed
    monkeypatch.setattr(scorer, "embed", lambda s, w: embedded.extend(s) or embed(s, w))
    scorer.score([perturb(g) for g in gold_sets], gold_sets)
    golds = {s for g in gold_sets for s in g}
    assert golds <= set(embedded)
    embedded.clear()
    preds = [[p + " Indeed." for p in perturb(g)] for g in gold_sets]
    second = scorer.score(preds, gold_sets)
    assert set(embedded) == {p for ps in preds for p in ps}  # predictions only
    expected = fresh.score(preds, gold_sets)
    for ours, ref in zip(second.per_passage, expected.per_passage):
        assert ours == pytest.approx(ref, abs=1e-6)
    scorer.score(gold_sets[:1], gold_sets[:1])  # another gold set: the memo is that set's
    assert set(scorer._references) == set(gold_sets[0])
    embedded.clear()
    monkeypatch.setattr(scorer, "idf", True)
    scorer.score(gold_sets[:1], gold_sets[:1])
    assert set(gold_sets[0]) <= set(embedded) and not scorer._references

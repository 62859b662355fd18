"""BERTScore set-F1 of proposition sets (the paper's propositionizer validation metric).

For one passage with gold propositions G and predicted propositions P, and a sentence
similarity s = BERTScore F1:

    recall    = mean_{g in G} max_{p in P} s(p, g)
    precision = mean_{p in P} max_{g in G} s(p, g)
    set-F1    = 2 * precision * recall / (precision + recall)

Calling bert-score once per (p, g) pair re-encodes every proposition |G| (or |P|) times.
Here each distinct proposition of a validation run is embedded once with bert-score's own
model, tokenizer and embedding helper, and the pairwise BERTScore of a whole set pair is one
batched tensor operation on the cached token embeddings, with bert-score's conventions:
greedy cosine matching over all tokens (special tokens included as match candidates),
[CLS]/[SEP] weighted 0, other tokens uniform (or idf), optional baseline rescaling. Padding
is masked out of the max, which equals bert-score on each pair alone (see `naive_set_f1`).

Validation scores the same gold sets every time: without idf weights (which depend on the
references given), a scorer keeps the embeddings of its last call's references and embeds
only the ones it has not seen (`reuse_references`), so a training run embeds its validation
gold once instead of once per validation. Memory: one call's references, what the call holds
anyway (6,700 gold propositions of ~20 tokens: ~0.5 GB with roberta-large, 60 MB with MiniLM).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from densex.utils.models import resolve_model

# Pairwise similarity tensors larger than this many elements are computed in chunks of preds.
_MAX_SIM_ELEMENTS = 1 << 25


@dataclass
class SetF1Result:
    """Corpus-level scores: means over passages of per-passage precision, recall and set-F1."""

    f1: float
    precision: float
    recall: float
    parse_rate: float
    props_per_passage_gold: float
    props_per_passage_pred: float
    n_passages: int
    n_unparsed: int
    per_passage: list[dict[str, float]] = field(default_factory=list, repr=False)

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """Scalar metrics keyed `prefix + name` (e.g. ``val/set_f1``), ready for `self.log_dict`."""
        d = asdict(self)
        d.pop("per_passage")
        d["set_f1"] = d.pop("f1")
        return {prefix + k: float(v) for k, v in d.items()}


def set_scores(sim: torch.Tensor) -> tuple[float, float, float]:
    """(precision, recall, F1) of one set pair from its [n_pred, n_gold] similarity matrix.

    Empty prediction or empty gold scores 0; both empty is a perfect match (1, 1, 1).
    """
    n_pred, n_gold = sim.shape
    if n_pred == 0 and n_gold == 0:
        return 1.0, 1.0, 1.0
    if n_pred == 0 or n_gold == 0:
        return 0.0, 0.0, 0.0
    precision = sim.max(dim=1).values.mean().item()
    recall = sim.max(dim=0).values.mean().item()
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


class SetF1Scorer:
    """Set-F1 with BERTScore F1 as the proposition similarity.

    Defaults follow bert-score's English default (roberta-large, layer 17, no idf, no
    baseline rescaling). A local path works as `model_type` but then needs `num_layers`
    (e.g. all-MiniLM-L6-v2 with `num_layers=6` for CPU tests).
    """

    def __init__(
        self,
        model_type: str = "roberta-large",
        num_layers: int | None = 17,
        idf: bool = False,
        batch_size: int = 64,
        lang: str | None = "en",
        rescale_with_baseline: bool = False,
        baseline_path: str | None = None,
        device: str | torch.device | None = None,
        reuse_references: bool = True,
    ) -> None:
        from bert_score import BERTScorer

        self.bert = BERTScorer(
            model_type=resolve_model(model_type),
            num_layers=num_layers,
            batch_size=batch_size,
            lang=lang,
            rescale_with_baseline=rescale_with_baseline,
            baseline_path=baseline_path,
            device=str(device) if device is not None else None,
            nthreads=0,
        )
        self.idf = idf
        self.batch_size = batch_size
        self.rescale_with_baseline = rescale_with_baseline
        # the last call's reference embeddings (uniform weights only: idf ones change with the
        # references), reused by the next call for the references it repeats
        self.reuse_references = reuse_references
        self._references: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def device(self) -> torch.device:
        return next(self.bert._model.parameters()).device

    def to(self, device: str | torch.device) -> SetF1Scorer:
        self.bert._model.to(device)
        self.bert.device = str(device)
        self._references = {}
        return self

    def _idf_dict(self, references: Sequence[str]) -> dict[int, float]:
        """bert-score's token weights: uniform with [CLS]/[SEP] at 0, or idf over the references."""
        from bert_score.utils import get_idf_dict

        tok = self.bert._tokenizer
        if self.idf:
            return get_idf_dict(list(references), tok, nthreads=0)
        weights: dict[int, float] = defaultdict(lambda: 1.0)
        weights[tok.sep_token_id] = 0.0
        weights[tok.cls_token_id] = 0.0
        return weights

    @torch.no_grad()
    def embed(
        self, sentences: Sequence[str], idf_dict: dict[int, float]
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Unit-norm token embeddings and normalised token weights of each distinct sentence.

        Sentences are sorted by length before batching (as bert-score does) so padding is small.
        """
        from bert_score.utils import get_bert_embedding

        distinct = sorted(set(sentences), key=lambda s: len(s.split(" ")), reverse=True)
        out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for start in range(0, len(distinct), self.batch_size):
            batch = distinct[start : start + self.batch_size]
            emb, mask, weights = get_bert_embedding(
                batch, self.bert._model, self.bert._tokenizer, idf_dict, device=self.device
            )
            emb = emb / emb.norm(dim=-1, keepdim=True)
            weights = weights.to(emb.device)
            for i, sent in enumerate(batch):
                n = int(mask[i].sum())
                w = weights[i, :n]
                total = w.sum()
                out[sent] = (emb[i, :n].float(), w / total if total > 0 else w)
        return out

    def _embed_references(
        self, references: Sequence[str], idf_dict: dict[int, float]
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """`embed(references)`, reusing the last call's embeddings of the references it
        repeats (`reuse_references`, uniform weights); these references are kept for the next
        call (only these: memory stays one call's)."""
        if self.idf or not self.reuse_references:
            self._references = {}
            return self.embed(references, idf_dict)
        distinct = list(dict.fromkeys(references))
        kept = {r: self._references[r] for r in distinct if r in self._references}
        kept.update(self.embed([r for r in distinct if r not in kept], idf_dict))
        self._references = kept
        return dict(kept)

    def pairwise(
        self,
        preds: Sequence[str],
        golds: Sequence[str],
        cache: dict[str, tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """BERTScore F1 of every (pred, gold) pair, [n_pred, n_gold], from cached embeddings."""
        if not preds or not golds:
            return torch.zeros(len(preds), len(golds))
        gold_emb, gold_mask, gold_w = _pad([cache[g] for g in golds])
        rows = []
        lg = gold_emb.shape[1]
        lp = max(cache[p][0].shape[0] for p in preds)
        step = max(1, _MAX_SIM_ELEMENTS // (len(golds) * lg * lp))
        for start in range(0, len(preds), step):
            pred_emb, pred_mask, pred_w = _pad([cache[p] for p in preds[start : start + step]])
            # sim[a, b, i, j] = cos(token i of pred a, token j of gold b)
            sim = torch.einsum("aid,bjd->abij", pred_emb, gold_emb)
            valid = pred_mask[:, None, :, None] & gold_mask[None, :, None, :]
            sim = sim.masked_fill(~valid, float("-inf"))
            word_p = sim.max(dim=3).values.masked_fill(~pred_mask[:, None, :], 0.0)
            word_r = sim.max(dim=2).values.masked_fill(~gold_mask[None, :, :], 0.0)
            p = (word_p * pred_w[:, None, :]).sum(-1)
            r = (word_r * gold_w[None, :, :]).sum(-1)
            f = torch.nan_to_num(2 * p * r / (p + r), nan=0.0)
            # bert-score sets the score of a sentence with no real tokens to 0
            empty = (pred_w.sum(-1) == 0)[:, None] | (gold_w.sum(-1) == 0)[None, :]
            f = f.masked_fill(empty, 0.0)
            if self.rescale_with_baseline:
                base = self.bert.baseline_vals[2].item()
                f = (f - base) / (1 - base)
            rows.append(f)
        return torch.cat(rows).cpu()

    def score(
        self, predictions: Sequence[Sequence[str] | None], golds: Sequence[Sequence[str]]
    ) -> SetF1Result:
        """Set-F1 over passages; a prediction of None (unparseable output) is an empty set.

        Aggregation: the mean over passages of per-passage set-F1 (not the F1 of the mean P
        and R); macro-averaged precision and recall are reported alongside.
        """
        if len(predictions) != len(golds):
            raise ValueError(f"{len(predictions)} predictions for {len(golds)} gold sets")
        preds = [list(p) if p is not None else [] for p in predictions]
        gold_sets = [list(g) for g in golds]
        all_gold = [s for g in gold_sets for s in g]
        idf_dict = self._idf_dict(all_gold)
        cache = self._embed_references(all_gold, idf_dict)
        cache.update(self.embed([s for p in preds for s in p if s not in cache], idf_dict))
        per_passage = []
        for p, g in zip(preds, gold_sets):
            precision, recall, f1 = set_scores(self.pairwise(p, g, cache))
            per_passage.append({"precision": precision, "recall": recall, "f1": f1})
        n = max(1, len(per_passage))
        n_unparsed = sum(p is None for p in predictions)
        return SetF1Result(
            f1=sum(r["f1"] for r in per_passage) / n,
            precision=sum(r["precision"] for r in per_passage) / n,
            recall=sum(r["recall"] for r in per_passage) / n,
            parse_rate=(len(predictions) - n_unparsed) / n,
            props_per_passage_gold=sum(map(len, gold_sets)) / n,
            props_per_passage_pred=sum(map(len, preds)) / n,
            n_passages=len(per_passage),
            n_unparsed=n_unparsed,
            per_passage=per_passage,
        )


def _pad(
    items: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stack variable-length (embeddings, weights) into padded tensors plus a bool mask."""
    lens = [e.shape[0] for e, _ in items]
    emb = torch.nn.utils.rnn.pad_sequence([e for e, _ in items], batch_first=True)
    w = torch.nn.utils.rnn.pad_sequence([w for _, w in items], batch_first=True)
    mask = (
        torch.arange(emb.shape[1], device=emb.device)[None, :]
        < torch.tensor(lens, device=emb.device)[:, None]
    )
    return emb, mask, w


def naive_set_f1(
    bert_scorer, predictions: Sequence[Sequence[str]], golds: Sequence[Sequence[str]]
) -> list[tuple[float, float, float]]:
    """Reference implementation: one `BERTScorer.score` call per (pred, gold) pair.

    Slow (each proposition is re-encoded for every pair it is in); used by the tests and the
    benchmark to check the batched scorer. Pairs are scored alone, not in padded batches:
    bert-score's batched greedy matching lets padding (cosine 0) win a max when all of a
    token's real similarities are negative, so its batched scores depend on the batch.
    """
    out = []
    for preds, gold in zip(predictions, golds):
        sim = torch.zeros(len(preds), len(gold))
        for i, p in enumerate(preds):
            for j, g in enumerate(gold):
                sim[i, j] = bert_scorer.score([p], [g], batch_size=1)[2].item()
        out.append(set_scores(sim))
    return out

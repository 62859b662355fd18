"""A copy-aware student propositionizer: a prefix LM over a BERT checkpoint with a pointer head.

`CopyPrefixLM` reads ``[CLS] source [SEP]`` and the target ``[CLS] y_1 ... y_m`` as one
sequence through one pretrained BERT stack (UniLM's seq2seq mask): source tokens attend to the
source, target tokens (token type 1, positions continuing after the source) to the source and
to the earlier target tokens. No weight of the attention is new. The next-token distribution
is a gated mixture (pointer-generator, See et al. 2017) of

- the vocabulary distribution: a dense + LayerNorm transform, then the tied word embeddings;
- a copy distribution over source positions: a cosine attention of the target state against
  the final state of the *preceding* source position, so "copy the token after the one I
  match" is the initial behaviour (an induction-head prior; see docs/architecture.md), plus a
  learnt bonus when the last 1..`NGRAM` target tokens equal the source tokens before a
  candidate (so a copied run continues where it is, not at an earlier repeat of its token).

The target is the propositions joined by one `surface.PROP_TOKEN` and closed by `[SEP]`
(`backbone.target_ids`); `surface.py` turns generated ids back into text with the source's
casing. Source and target share the checkpoint's `max_position_embeddings`.
`CopyLMConfig` / `CopyPrefixLM` are registered with transformers' Auto classes on import, so
`AutoModelForSeq2SeqLM.from_pretrained(dir)` loads an export (`backbone.load_seq2seq`).

Why this module is long: one model class whose layers pass, copy head, training loss and
packing share the same tensors' layout (source candidates, history, positions); splitting
them would spread one convention over several files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForSeq2SeqLM, BertConfig, GenerationConfig
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import BertModel, BertPreTrainedModel

from densex.propositionizer.copy_decode import decode
from densex.propositionizer.surface import COPY_MODEL_TYPE

__all__ = [
    "MODEL_TYPE",
    "CopyLMConfig",
    "CopyLMOutput",
    "CopyPrefixLM",
    "content_positions",
    "coverage_loss",
    "covered_softmax",
    "label_weights",
]

MODEL_TYPE = COPY_MODEL_TYPE
NGRAM = 4  # the copy head's continuation bonus looks at up to this many previous tokens


class CopyLMConfig(BertConfig):
    """BERT's config plus the student's: `use_copy` (False: the plain prefix LM, for the
    ablation), the copy attention's initial scale and n-gram bonus, the proposition
    separator's id, the target segment's token type, the decoding's `no_repeat_ngram_size`,
    `coverage_penalty`, `no_repeat_proposition`, `end_penalty` and `context_penalty` (null:
    none; `copy_decode.py`), kept here because config.json travels with an export, the
    training's `coverage_loss` weight (0: none; `coverage_loss`) and `novel_token_weight` (1:
    every label token weighs the same; `label_weights`), and the token ids of the source's
    content marker (`pairs.CONTENT_MARKER`): coverage (penalty and loss) counts only the
    source positions after its last occurrence, so read-only context and the title may be
    copied at will (null, or no marker in a source: every position counts)."""

    model_type = MODEL_TYPE

    def __init__(
        self,
        use_copy: bool = True,
        copy_scale: float = 10.0,
        copy_ngram_bonus: float = 2.0,
        prop_token_id: int | None = None,
        target_token_type: int = 1,
        no_repeat_ngram_size: int | None = None,
        coverage_penalty: float | None = None,
        coverage_loss: float = 0.0,
        no_repeat_proposition: bool | None = None,
        novel_token_weight: float = 1.0,
        end_penalty: float | None = None,
        context_penalty: float | None = None,
        content_marker_ids: list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.content_marker_ids = content_marker_ids
        self.use_copy = use_copy
        self.copy_scale = copy_scale
        self.copy_ngram_bonus = copy_ngram_bonus
        self.prop_token_id = prop_token_id
        self.target_token_type = target_token_type
        self.no_repeat_ngram_size = no_repeat_ngram_size
        self.coverage_penalty = coverage_penalty
        self.coverage_loss = coverage_loss
        self.no_repeat_proposition = no_repeat_proposition
        self.novel_token_weight = novel_token_weight
        self.end_penalty = end_penalty
        self.context_penalty = context_penalty


@dataclass
class CopyLMOutput(ModelOutput):
    """`loss`: mean negative log-likelihood of the label tokens plus the weighted coverage
    loss (None without labels); `nll` and `coverage` its two parts."""

    loss: torch.Tensor | None = None
    nll: torch.Tensor | None = None
    coverage: torch.Tensor | None = None


class CopyPrefixLM(BertPreTrainedModel):
    """The prefix LM with a pointer-generator head (module docstring). `forward` is the
    teacher-forced loss; `generate` (greedy or beam, `copy_decode.py`) returns ids like a
    seq2seq `generate`: column 0 the start token `[CLS]`, rows padded after `[SEP]`."""

    config_class = CopyLMConfig
    config: CopyLMConfig

    def __init__(self, config: CopyLMConfig) -> None:
        super().__init__(config)
        h = config.hidden_size
        self.bert = BertModel(config, add_pooling_layer=False)
        self.transform = nn.Linear(h, h)
        self.transform_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.vocab_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.copy_query = nn.Linear(h, h)
        self.copy_key = nn.Linear(h, h)
        self.copy_log_scale = nn.Parameter(torch.tensor(math.log(config.copy_scale)))
        self.copy_ngram = nn.Parameter(torch.full((NGRAM,), config.copy_ngram_bonus))
        self.gate = nn.Linear(2 * h, 1)
        self.post_init()
        self.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
        )

    def init_heads(self) -> None:
        """The new head weights' starting point: identity transforms (copy by matching the
        same token's states; vocabulary logits = the state against the word embeddings), a
        zero bias and an even gate."""
        with torch.no_grad():
            for lin in (self.transform, self.copy_query, self.copy_key):
                lin.weight.copy_(torch.eye(lin.weight.shape[0]))
                lin.bias.zero_()
            self.transform_norm.reset_parameters()
            self.vocab_bias.zero_()
            self.copy_log_scale.fill_(math.log(self.config.copy_scale))
            self.copy_ngram.fill_(self.config.copy_ngram_bonus)
            self.gate.weight.zero_()
            self.gate.bias.zero_()

    # ---- the stack ---------------------------------------------------------------------------
    def run_layers(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        past: list[Any] | None = None,
        at: int | torch.Tensor = 0,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """BERT's layers over embeddings `x` (B, T, h) with a boolean attention `mask`
        (B, 1, T, keys); returns the states and each layer's (key, value). Without `past` the
        keys are these T; with `past` (per layer (key, value) buffers (B, heads, >= at + T,
        d), holding `at` earlier positions) these T are written into the buffers at `at` and
        the keys are the first `at` + T positions (docs/architecture.md, "Copy student
        decoding cost"). `at` may be one offset per row (a (B,) tensor: rows at different
        target lengths, `copy_decode`'s lookahead); the keys are then the first max(`at`) + T
        positions and `mask` hides what a row has not written."""
        cache = []
        rows = slots = None
        if torch.is_tensor(at):  # per-row write positions (B, T)
            rows = torch.arange(x.shape[0], device=x.device)[:, None]
            slots = at[:, None] + torch.arange(x.shape[1], device=x.device)
        for i, layer in enumerate(self.bert.encoder.layer):
            att = layer.attention.self
            b, t, _ = x.shape
            shape = (b, t, att.num_attention_heads, att.attention_head_size)
            q, k, v = (
                lin(x).view(shape).transpose(1, 2) for lin in (att.query, att.key, att.value)
            )
            if past is not None:
                keys, values = past[i]
                cache.append(past[i])
                if slots is None:
                    keys[:, :, at : at + t], values[:, :, at : at + t] = k, v
                    k, v = keys[:, :, : at + t], values[:, :, : at + t]
                else:  # advanced indices around a slice: the indexed view is (B, T, heads, d)
                    keys[rows, :, slots], values[rows, :, slots] = (
                        k.transpose(1, 2),
                        v.transpose(1, 2),
                    )
                    width = mask.shape[-1]
                    k, v = keys[:, :, :width], values[:, :, :width]
            else:
                cache.append((k, v))
            p = att.dropout.p if self.training else 0.0
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            x = layer.attention.output(ctx.transpose(1, 2).reshape(b, t, -1), x)
            x = layer.output(layer.intermediate(x), x)
        return x, cache

    def embed(
        self, ids: torch.Tensor, positions: torch.Tensor, token_type: int | torch.Tensor
    ) -> torch.Tensor:
        """Word + position + token-type embeddings (BERT's, LayerNorm and dropout included);
        `token_type` one for all or one per token."""
        types = token_type if torch.is_tensor(token_type) else torch.full_like(ids, token_type)
        return self.bert.embeddings(input_ids=ids, token_type_ids=types, position_ids=positions)

    def encode_source(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        """The source pass: states, per-layer keys/values, lengths and the copy keys (the
        normalised, projected state of the position before each candidate 1..S-1)."""
        s = input_ids.shape[1]
        valid = attention_mask.bool()
        pos = torch.arange(s, device=input_ids.device).expand_as(input_ids)
        mask = valid[:, None, None, :].expand(-1, 1, s, s)
        h, cache = self.run_layers(self.embed(input_ids, pos, 0), mask)  # a source-only pass
        view = self.source_view(h, input_ids, valid)
        return {**view, "cache": cache, "valid": valid, "lengths": valid.sum(1)}

    # ---- the head ----------------------------------------------------------------------------
    def vocab_logits(self, h: torch.Tensor, shortlist: tuple | None = None) -> torch.Tensor:
        """Vocabulary logits of target states (…, h) through the tied word embeddings: all V,
        or with a `shortlist` (token ids (K,), their embeddings (K, h) and biases (K,):
        `copy_decode.with_shortlist`) those K only."""
        z = self.transform_norm(self.transform(h))
        if shortlist is None:
            return F.linear(z, self.bert.embeddings.word_embeddings.weight, self.vocab_bias)
        return F.linear(z, shortlist[1], shortlist[2])

    def vocab_log_probs(self, h: torch.Tensor, shortlist: tuple | None = None) -> torch.Tensor:
        """The vocabulary path's log-probabilities (…, V), fp32. With a `shortlist` only its
        K logits are computed and normalised and every other token gets -inf: the projection
        onto the vocabulary, half a step's arithmetic, shrinks V/K-fold."""
        logp = self.vocab_logits(h, shortlist).float().log_softmax(-1)
        if shortlist is None:
            return logp
        full = logp.new_full((*logp.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy_(-1, shortlist[0], logp)

    def copy_attention(
        self, h: torch.Tensor, src: dict, history: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(copy weights over source candidates (B, T, S-1), (log gate of the vocabulary path,
        of the copy path) (B, T, 1)) for target states `h` (B, T, h) whose last `NGRAM` input
        tokens are `history` (B, T, NGRAM; most recent first, -1 before the start). A
        candidate whose preceding source tokens equal those inputs gets a learnt bonus per
        matched length (the exact continuation of a copied run)."""
        q = F.normalize(self.copy_query(h), dim=-1)
        scores = self.copy_log_scale.exp() * q @ src["copy_keys"].transpose(1, 2)
        matched = torch.ones_like(scores, dtype=torch.bool)
        for k in range(NGRAM):  # src["before"][..., k]: the source token k+1 before a candidate
            matched = matched & (src["before"][:, None, :, k] == history[:, :, None, k])
            scores = scores + self.copy_ngram[k] * matched
        if "context_penalty" in src:  # decoding: copies from the title and context cost more
            scores = scores - src["context_penalty"] * (1.0 - src["cover"])[:, None, :]
        scores = scores.masked_fill(~src["copy_valid"][:, None, :], float("-inf"))
        # decoding with a coverage penalty (copy_decode.py): position by position
        weights = covered_softmax(scores, src) if "coverage" in src else scores.softmax(-1)
        context = weights @ src["states"][:, 1:]
        z = self.gate(torch.cat([h, context], -1))
        return weights, (F.logsigmoid(z), F.logsigmoid(-z))

    def next_log_probs(self, h: torch.Tensor, src: dict, history: torch.Tensor) -> torch.Tensor:
        """Log-probabilities over the vocabulary of the next token for target states
        `h` (B, T, h): the gated mixture of the vocabulary and copy distributions."""
        if not self.config.use_copy:
            return self.vocab_log_probs(h)
        return self.mix(h, src, *self.copy_attention(h, src, history))

    def mix(
        self,
        h: torch.Tensor,
        src: dict,
        weights: torch.Tensor,
        gates: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """`next_log_probs` from the copy head's output for `h` (`copy_attention`: the copy
        `weights` (B, T, S-1) and the log `gates`), so a decoder that has it need not
        recompute it (`copy_decode`'s lookahead mixes at one position of several)."""
        log_gen, log_copy = gates
        logp = self.vocab_log_probs(h, src.get("shortlist"))
        index = src["copy_ids"][:, None, :].expand(-1, h.shape[1], -1)
        copy = torch.zeros_like(logp).scatter_add_(-1, index, weights.float())
        # the copy path has mass only at the source's token ids: mix there, not over the
        # whole vocabulary (elsewhere the mixture is the vocabulary path's alone)
        out = log_gen.float() + logp
        mixed = torch.logaddexp(
            out.gather(-1, index), log_copy.float() + copy.gather(-1, index).clamp_min(1e-30).log()
        )
        return out.scatter_(-1, index, mixed)

    def content_mask(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`content_positions` of these sources under this model's config (what the end
        penalty counts, `copy_decode.end_words`)."""
        return content_positions(input_ids, self.config)

    # ---- training ----------------------------------------------------------------------------
    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Teacher-forcing inputs: the labels shifted right after the start token `[CLS]`,
        ignored positions (-100) as padding."""
        start = torch.full_like(labels[:, :1], self.config.decoder_start_token_id)
        shifted = torch.cat([start, labels[:, :-1]], 1)
        return shifted.masked_fill(shifted == -100, self.config.pad_token_id)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> CopyLMOutput:
        """Teacher-forced NLL of `labels` (B, T; -100 ignored) given the sources, averaged
        with `label_weights` (a plain mean at `config.novel_token_weight` 1), plus
        `config.coverage_loss` x the copy attention's coverage loss when that weight is set."""
        if labels is None:
            return CopyLMOutput(loss=None)
        dec = decoder_input_ids
        dec = self.prepare_decoder_input_ids_from_labels(labels) if dec is None else dec
        valid, keep = attention_mask.bool(), labels != -100
        width = int((valid.sum(1) + keep.sum(1)).max())
        room = self.config.max_position_embeddings
        if width > room:
            raise ValueError(
                f"source + target ({width} tokens) exceed the {room} positions they share"
            )
        ids, types, mask, at = pack_prefix_lm(input_ids, valid, dec, keep, width, self.config)
        pos = torch.arange(width, device=ids.device).expand_as(ids)
        h, _ = self.run_layers(self.embed(ids, pos, types), mask)
        src = self.source_view(h[:, : input_ids.shape[1]], input_ids, valid)
        h_target = h.gather(1, at[..., None].expand(-1, -1, h.shape[-1]))
        logp, weights = self.label_log_probs(h_target, src, labels, input_history(dec))
        w = label_weights(input_ids, labels, self.config)
        nll = -(logp * w).sum() / w.sum() if w is not None else -logp.mean()
        lam = float(getattr(self.config, "coverage_loss", 0.0) or 0.0)
        if weights is None or lam == 0.0:
            return CopyLMOutput(loss=nll, nll=nll.detach())
        cov = coverage_loss(weights * src["cover"][:, None, :], labels != -100)
        return CopyLMOutput(loss=nll + lam * cov, nll=nll.detach(), coverage=cov.detach())

    def label_log_probs(
        self, h: torch.Tensor, src: dict, labels: torch.Tensor, history: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probability of each kept label (labels != -100, flattened) under the mixture of
        `next_log_probs`, without materialising the mixture over the vocabulary: the vocabulary
        path's logits only at the kept positions, the copy path's mass on the label only. Also
        returns the copy weights (B, T, S-1; None without the copy head)."""
        keep = labels != -100
        target = labels[keep]
        logits = self.vocab_logits(h[keep]).float()
        log_vocab = -F.cross_entropy(logits, target, reduction="none")
        if not self.config.use_copy:
            return log_vocab, None
        weights, (log_gen, log_copy) = self.copy_attention(h, src, history)
        hit = src["copy_ids"][:, None, :] == labels[:, :, None]
        copied = (weights.float() * hit).sum(-1)[keep]
        logp = torch.logaddexp(
            log_gen[keep].squeeze(-1).float() + log_vocab,
            log_copy[keep].squeeze(-1).float() + copied.clamp_min(1e-30).log(),
        )
        return logp, weights

    def source_view(self, h: torch.Tensor, input_ids: torch.Tensor, valid: torch.Tensor) -> dict:
        """What the head needs of the source (`encode_source`'s keys minus the caches)."""
        before = input_history(input_ids[:, :-1], fill=-2)  # never equal to a history's -1
        return {
            "states": h,
            "copy_keys": F.normalize(self.copy_key(h[:, :-1]), dim=-1),
            "copy_ids": input_ids[:, 1:],
            "copy_valid": valid[:, 1:],
            "before": before,
            "cover": content_positions(input_ids, self.config)[:, 1:].to(h.dtype),
        }

    # ---- generation --------------------------------------------------------------------------
    @staticmethod
    def step_history(fed: torch.Tensor) -> torch.Tensor:
        """The copy head's `history` (R, 1, NGRAM) for the next step, from the tokens fed so far
        (R, t + 1)."""
        return input_history(fed[:, -NGRAM:])[:, -1:]

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        max_new_tokens: int = 512,
        num_beams: int = 1,
        no_repeat_ngram_size: int | None = None,
        coverage_penalty: float | None = None,
        no_repeat_proposition: bool | None = None,
        lookahead: int | None = None,
        drop_finished: bool = True,
        shortlist: torch.Tensor | None = None,
        end_penalty: float | None = None,
        content_vocab: torch.Tensor | None = None,
        context_penalty: float | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """Greedy (`num_beams` 1) or beam decoding (`copy_decode.decode`); a null decoding rule
        takes the config's. `lookahead` (greedy's drafted source tokens per step; null:
        `copy_decode.LOOKAHEAD`, 0: one token a step) and `drop_finished` change the cost,
        not the tokens; a `shortlist` (token ids the vocabulary path may write besides the
        sources' own, `copy_decode.with_shortlist`) changes both. `content_vocab` (V,) bool:
        the word pieces `end_penalty` counts (`content_pieces.content_vocab`; None: all)."""
        rules = {
            "no_repeat_ngram_size": no_repeat_ngram_size,
            "coverage_penalty": coverage_penalty,
            "no_repeat_proposition": no_repeat_proposition,
            "end_penalty": end_penalty,
            "context_penalty": context_penalty,
        }
        for name, value in rules.items():  # null: the config's (an export carries them)
            if value is None:
                rules[name] = getattr(self.config, name, None)
        return decode(
            self,
            input_ids,
            attention_mask,
            max_new_tokens,
            num_beams,
            lookahead=lookahead,
            drop_finished=drop_finished,
            shortlist=shortlist,
            content_vocab=content_vocab,
            **rules,
        )


def coverage_loss(weights: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """See et al. 2017's coverage loss of copy weights (B, T, S) at the kept target positions
    `keep` (B, T): the mean over those positions of sum_s min(a_t[s], c_t[s]), where the
    coverage c_t = sum of the earlier kept steps' weights. 0 when no source position is
    attended twice; at most 1 a step."""
    w = torch.where(keep[..., None], weights.float(), 0.0)
    cover = w.cumsum(1) - w
    return torch.minimum(w, cover).sum(-1)[keep].mean()


def label_weights(
    input_ids: torch.Tensor, labels: torch.Tensor, config: Any
) -> torch.Tensor | None:
    """The NLL weight of each kept label (labels != -100, flattened like `label_log_probs`):
    `config.novel_token_weight` for a *novel* token, one whose id is in no content position of
    its source (`content_positions`: the sentence itself, not its read-only context or title)
    and is not the proposition separator or `[SEP]`; 1 for the others. These are the words a
    proposition adds to its sentence (the antecedent a pronoun stands for, the subject a clause
    lacks, a restated verb), few and the ones a question names. None at weight 1."""
    scale = float(getattr(config, "novel_token_weight", 1.0) or 1.0)
    if scale == 1.0:
        return None
    content = torch.where(content_positions(input_ids, config), input_ids, -1)
    keep = labels != -100
    seen = (content[:, None, :] == labels[:, :, None]).any(-1)  # (B, T)
    novel = ~seen
    for closer in (config.eos_token_id, getattr(config, "prop_token_id", None)):
        if closer is not None:
            novel &= labels != closer
    return torch.where(novel, scale, 1.0)[keep].float()


def covered_softmax(scores: torch.Tensor, src: dict) -> torch.Tensor:
    """The copy weights of decoding with a coverage penalty: copy `scores` (B, T, S-1) of T
    consecutive target positions, each penalised by `src["coverage_penalty"]` x the coverage
    so far (`src["coverage"]`, fp32 (B, S-1): the earlier positions' weights on the content,
    `src["cover"]`), taken in order so that position t sees positions < t (one position: a
    plain step; several: `copy_decode`'s lookahead verifying a draft). Updates
    `src["coverage"]` to the coverage after all T and sets `src["coverage_trace"]` (B, T, S-1):
    the coverage after each position (the decoder keeps the one after its accepted prefix)."""
    coverage, weights, trace = src["coverage"], [], []
    for t in range(scores.shape[1]):
        penalty = src["coverage_penalty"] * coverage  # fp32 coverage, bf16 scores stay bf16
        w = (scores[:, t] - penalty.to(scores.dtype)).softmax(-1)
        coverage = coverage + (w * src["cover"]).float()
        weights.append(w)
        trace.append(coverage)
    src["coverage"], src["coverage_trace"] = coverage, torch.stack(trace, 1)
    return torch.stack(weights, 1)


def content_positions(input_ids: torch.Tensor, config: Any) -> torch.Tensor:
    """(B, S) bool: the source positions after the last occurrence of the config's
    `content_marker_ids` in each row (all positions in a row without it, or without a marker
    in the config): what coverage counts."""
    marker = getattr(config, "content_marker_ids", None) or []
    b, s = input_ids.shape
    m = len(marker)
    if m == 0 or s < m:
        return torch.ones_like(input_ids, dtype=torch.bool)
    windows = input_ids.unfold(1, m, 1)  # (B, S - m + 1, m)
    hit = (windows == torch.tensor(marker, device=input_ids.device)).all(-1)
    ends = torch.arange(m, s + 1, device=input_ids.device)  # first position after each window
    start = (hit * ends).max(1).values  # 0 where the row has no marker
    return torch.arange(s, device=input_ids.device)[None, :] >= start[:, None]


def input_history(ids: torch.Tensor, fill: int = -1) -> torch.Tensor:
    """(B, T, NGRAM): at each position the token there and the `NGRAM` - 1 before it, most
    recent first (`fill` before the first)."""
    cols = [ids]
    for k in range(1, NGRAM):
        pad = ids.new_full((ids.shape[0], min(k, ids.shape[1])), fill)
        cols.append(torch.cat([pad, ids[:, : max(ids.shape[1] - k, 0)]], 1))
    return torch.stack(cols, -1)


def pack_prefix_lm(
    input_ids: torch.Tensor,
    valid: torch.Tensor,
    dec: torch.Tensor,
    keep: torch.Tensor,
    width: int,
    config: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's source (its `valid` tokens) and target inputs (`dec` where `keep`) packed
    side by side into `width` positions, padding only at the end (so a batch costs its longest
    pair, not its longest source plus its longest target). Returns the ids, token types,
    UniLM's seq2seq mask (B, 1, W, W: source rows see the source, every other row the source
    and the rows from the target's start up to itself) and each target slot's position (B, T;
    slots past a row's target point at its last position, their labels are ignored)."""
    b, t = dec.shape
    n = valid.sum(1)
    ids = input_ids.new_full((b, width), config.pad_token_id)
    ids[:, : input_ids.shape[1]] = input_ids.masked_fill(~valid, config.pad_token_id)
    at = (n[:, None] + torch.arange(t, device=dec.device)).clamp_max(width - 1)
    rows = torch.arange(b, device=dec.device)[:, None].expand(-1, t)
    ids[rows[keep], at[keep]] = dec[keep]
    pos = torch.arange(width, device=dec.device)
    source = pos[None, :] < n[:, None]  # (B, W)
    types = (~source).long() * config.target_token_type
    causal = pos[:, None] >= pos[None, :]  # (W, W): row i sees column j <= i
    mask = source[:, None, :] | (~source[:, :, None] & causal[None])
    return ids, types, mask[:, None], at


AutoConfig.register(MODEL_TYPE, CopyLMConfig, exist_ok=True)
AutoModelForSeq2SeqLM.register(CopyLMConfig, CopyPrefixLM, exist_ok=True)

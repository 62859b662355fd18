"""Greedy and beam decoding of the copy-aware prefix LM (`copy_lm.CopyPrefixLM`).

The source is encoded once (its per-layer keys and values are the cache every target step
attends to); each step feeds one token per row and takes the next-token log-probabilities of
the vocabulary/copy mixture. The output is shaped like a transformers seq2seq `generate`
output, so `utils.generation.generate_sorted` treats it the same way: column 0 is the start
token, a finished row is padded after its end token, and a row that ran out of tokens has no
end token and the full width (`max_new_tokens` + 1, also when the shared position budget of
source and target cut it earlier), which is how `hit_max_new_tokens` recognises a cut output.
Beam search ranks finished hypotheses by log-probability / length (transformers' default
`length_penalty` 1.0). `no_repeat_ngram_size` n bans, at each step and per row, every token
that would repeat an n-gram of that row's output (transformers' rule of the same name; the
model config's value when the caller gives none): a pointer-generator's typical
failure is to copy the same source span again and again. `coverage_penalty` β subtracts β times
each source candidate's copy attention summed over the steps so far from its copy score (the
coverage of See et al. 2017, applied at decoding only), so a span already copied is less
likely to be copied again while a subject the target repeats still can be.
`no_repeat_proposition` bans, per row, the tokens that close a proposition (`[PROP]`, `[SEP]`)
while the open proposition equals one the row has already closed: a student that cannot phrase
a sentence's next clause as a proposition of its own writes the previous one again (greedy, 58%
of its propositions were duplicates); under beam search the banned hypothesis gives way to one
that goes on. A `shortlist` restricts the vocabulary path to the batch's source tokens plus
the few the student adds to its sources (`with_shortlist`): cheaper steps, outputs that may
differ (measured, not assumed).
`end_penalty` ε subtracts ε times the share of the sentence's content pieces that the row has
not written yet from the end token's log-probability (`end_words`; the content pieces are
those of `content_vocab`, the sentence's words less stop words and punctuation, or without it
every piece of the sentence): a student that ends before it has said what its sentence says
(coverage 86-87% of the content words, the teacher's 97%) goes on while much is unsaid, and
under beam search a hypothesis that ends early carries the penalty in its final score (the
coverage term of Wu et al. 2016's beam scoring, counted on written pieces). With it, a row
that has written `END_RATIO` times its sentence's word pieces (plus `END_SLACK`) ends there:
a sentence whose words the student cannot place would otherwise run to `max_new_tokens`
(2.7% of the validation sentences at ε = 20, each one output of repeated context copies).
`context_penalty` γ subtracts γ from the copy score of every title and context position
(`copy_lm.copy_attention`; the content positions keep theirs): a student that copies a clause
of an earlier sentence in place of its own sentence's ("entrance to the V&A is located in the
Brompton district" for "entrance to the V&A has been free since 2001") copies from its own
sentence first, while an antecedent it needs can still come from the context.

Cheaper, same tokens (`benchmarks/propositionizer_speed.py` measures both): greedy leaves
finished rows out of the batch (`DROP_FRACTION`) and, when asked (`lookahead` k > 0; off by
default, `LOOKAHEAD`: it measured slower), verifies copy-span drafts (prompt-lookup decoding
with the source as the draft: after the row's newest tokens, the k source tokens that follow
their longest match) in one pass through the cached layers, keeping
the drafted tokens greedy would have written and greedy's next one. Each verified position sees
what the one-token loop would have seen: its own n-gram history, the coverage of the positions
before it (`copy_lm.covered_softmax`, position by position), and the decoding rules on the
tokens up to it, so every rule stays on under lookahead. Beam search leaves finished examples
out and reorders only the target positions of the cache. Per step, time and memory grow with the batch's rows x (1 + drafted tokens) for the layers
and the vocabulary mixture, and the cache with rows x (source + output length); exactness holds
in exact arithmetic (float rounding may differ between batch shapes, as between batch sizes).

Why this module is long: the plain loop (the reference), its cheaper equal and beam search
share one step, one cache layout and the decoding rules; apart, each would restate them.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "LOOKAHEAD",
    "ban_repeated_ngrams",
    "ban_repeated_propositions",
    "decode",
    "decode_step",
    "end_words",
    "unsaid_share",
]

_HASH_BASE, _HASH_MOD = 1_000_003, 2_147_483_647  # products stay far below 2**63
# greedy's drafted source tokens per step: off by default, as it costs more than it saves on
# the students measured (a verified position pays the vocabulary projection and the rules
# whether it is accepted or not: per-sentence greedy on 2 Intel Xeon cores, 3.81 passages/s
# one token a step vs 3.43 / 3.01 / 2.27 with 2 / 4 / 8 drafted; docs/propositionizer.md)
LOOKAHEAD = 0
# with the end penalty, a row ends after this many times its sentence's word pieces (+ slack):
# the teacher's propositions of a validation sentence are at most 2.7 times its words (99th
# percentile 2.1)
END_RATIO, END_SLACK = 3, 8
DROP_FRACTION = 0.125  # finished rows are dropped once they are this share of the batch


def decode(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
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
) -> torch.Tensor:
    """Generated ids (B, 1 + n) for each source row (module docstring). Greedy decoding
    verifies up to `lookahead` drafted source tokens per step (None: `LOOKAHEAD`, off; 0: one
    token a step) and, with `drop_finished`, leaves finished rows (beam search: finished examples)
    out of the batch; `lookahead` 0 without `drop_finished` is the plain one-token loop
    (`_greedy`), which the others equal token for token."""
    src = model.encode_source(input_ids, attention_mask)
    if shortlist is not None:
        src["shortlist"] = with_shortlist(model, shortlist, input_ids[attention_mask.bool()])
    src["no_repeat"] = int(no_repeat_ngram_size or 0)
    if no_repeat_proposition:
        cfg = model.config
        src["closers"] = (cfg.prop_token_id, cfg.eos_token_id)  # not a tensor: not per row
    if end_penalty:  # per row: the distinct content pieces of its sentence (-1: padding)
        sentence = sentence_mask(model, input_ids)
        src["end_words"] = end_words(input_ids, sentence, content_vocab)
        src["end_penalty"] = float(end_penalty)
        src["end_budget"] = END_RATIO * sentence.sum(1) + END_SLACK
    if context_penalty:  # 0 or null: no rule
        src["context_penalty"] = float(context_penalty)
    if coverage_penalty:  # the copy attention summed over the steps so far, per candidate
        src["coverage"] = torch.zeros(src["copy_ids"].shape, device=input_ids.device)
        src["coverage_penalty"] = float(coverage_penalty)
    room = int(model.config.max_position_embeddings - src["lengths"].max())
    steps = max(0, min(max_new_tokens, room))
    k = LOOKAHEAD if lookahead is None else int(lookahead)
    if num_beams > 1:
        out = _beam(model, src, steps, num_beams, drop_finished)
    elif k == 0 and not drop_finished:
        out = _greedy(model, src, steps)
    else:
        out = _greedy_rows(model, src, steps, k)
    if steps < max_new_tokens and out.shape[1] == steps + 1:  # cut by the position budget
        pad = out.new_full((out.shape[0], max_new_tokens - steps), model.config.pad_token_id)
        out = torch.cat([out, pad], 1)
    return out


def with_shortlist(model: Any, shortlist: torch.Tensor, sources: torch.Tensor) -> tuple:
    """The vocabulary path's shortlist for one batch (`copy_lm.vocab_log_probs`): the ids of
    `shortlist` (the tokens a student adds to its sources, `shortlist.py`), every token of the
    batch's `sources`, `[PROP]` and `[SEP]`, sorted, with their tied embeddings and biases
    (gathered once a batch; a tuple, so the per-row bookkeeping leaves it whole)."""
    cfg = model.config
    closers = sources.new_tensor([cfg.prop_token_id, cfg.eos_token_id])
    ids = torch.cat([shortlist.to(sources), sources, closers]).unique()
    weight = model.bert.embeddings.word_embeddings.weight[ids]
    return ids, weight, model.vocab_bias[ids]


def end_words(
    input_ids: torch.Tensor, sentence: torch.Tensor, content_vocab: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, W) the distinct word pieces of each row's sentence (`sentence`: its `sentence_mask`)
    that `content_vocab` (V,) bool marks (None: every piece but the special tokens), sorted,
    -1 after them: what `end_penalty` counts as said or unsaid."""
    keep = sentence  # not changed in place: the caller's budget reads it too
    if content_vocab is not None:
        keep = keep & content_vocab.to(input_ids.device)[input_ids]
    ids = torch.where(keep, input_ids, -1).sort(1).values
    repeat = torch.cat(
        [torch.zeros_like(ids[:, :1], dtype=torch.bool), ids[:, 1:] == ids[:, :-1]], 1
    )
    ids = torch.where(repeat, -1, ids).sort(1, descending=True).values
    width = max(1, int((ids >= 0).sum(1).max()))
    return ids[:, :width]


def sentence_mask(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) bool: the word pieces of each row's sentence (its content positions,
    `copy_lm.content_positions`, the special tokens and padding left out)."""
    cfg = model.config
    special = [cfg.pad_token_id, cfg.decoder_start_token_id, cfg.eos_token_id, cfg.prop_token_id]
    return model.content_mask(input_ids) & ~torch.isin(input_ids, input_ids.new_tensor(special))


def unsaid_share(words: torch.Tensor, fed: torch.Tensor, lengths: torch.Tensor | None = None):
    """(R,) the share of each row's `words` (R, W; -1 padding, `end_words`) absent from its
    tokens `fed` (R, t + 1; each row's first `lengths`, default all); 0 for a row without
    words."""
    if lengths is not None:
        cols = torch.arange(fed.shape[1], device=fed.device)[None, :]
        fed = torch.where(cols < lengths[:, None], fed, -2)
    real = words >= 0
    said = (words[:, :, None] == fed[:, None, :]).any(-1) & real
    return 1.0 - said.sum(1) / real.sum(1).clamp_min(1)


def decode_step(model: Any, src: dict, cache: list, fed: torch.Tensor, t: int) -> tuple:
    """Feed the last of the tokens `fed` so far (R, t + 1) at target step `t`: (next-token
    log-probs (R, V), the new cache)."""
    token = fed[:, -1]
    pos = (src["lengths"] + t)[:, None]
    x = model.embed(token[:, None], pos, model.config.target_token_type)
    seen = torch.ones(token.shape[0], t + 1, dtype=torch.bool, device=token.device)
    mask = torch.cat([src["valid"], seen], 1)[:, None, None, :]
    at = src["valid"].shape[1] + t  # the padded source's width, then the target's steps
    h, cache = model.run_layers(x, mask, with_room(cache, at + 1), at)
    logp = model.next_log_probs(h, src, model.step_history(fed))[:, 0]
    return apply_rules(model, src, logp, fed), cache


def apply_rules(
    model: Any,
    src: dict,
    logp: torch.Tensor,
    fed: torch.Tensor,
    lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """Next-token `logp` (R, V) after the tokens `fed` (R, t + 1; each row's first `lengths`,
    default all) with the decoding rules applied: never the padding or the start token, and
    the `end_penalty` (and its budget) and the `no_repeat_ngram_size` and
    `no_repeat_proposition` bans where they are on."""
    logp[:, [model.config.pad_token_id, model.config.decoder_start_token_id]] = float("-inf")
    rows = () if lengths is None else (lengths,)  # the one-token loop's calls stay as they were
    if "end_penalty" in src:
        unsaid = unsaid_share(src["end_words"], fed, *rows)
        logp[:, model.config.eos_token_id] -= src["end_penalty"] * unsaid.to(logp.dtype)
    if src.get("no_repeat", 0) > 1:
        logp = ban_repeated_ngrams(logp, fed, src["no_repeat"], *rows)
    if "closers" in src:
        logp = ban_repeated_propositions(logp, fed, fed.new_tensor(src["closers"]), *rows)
    if "end_budget" in src:  # a row past its budget ends now
        written = (fed.shape[1] if lengths is None else lengths) - 1
        over = (written >= src["end_budget"]).nonzero().flatten()
        if len(over):
            logp[over] = float("-inf")
            logp[over, model.config.eos_token_id] = 0.0
    return logp


def with_room(cache: list, need: int) -> list:
    """The per-layer (key, value) buffers of `cache`, grown (doubled, at least to `need`
    positions, the filled ones copied) when they hold fewer than `need`: appending a step
    then costs no copy."""
    have = cache[0][0].shape[2]
    if have >= need:
        return cache
    size = max(need, 2 * have)

    def grow(a: torch.Tensor) -> torch.Tensor:
        # zeros, not empty: a row of the lookahead attends over slots it has not written
        # (masked), and masked garbage could be NaN, which a zero weight does not cancel
        b = a.new_zeros(*a.shape[:2], size, a.shape[3])
        b[:, :, :have] = a
        return b

    return [tuple(grow(a) for a in pair) for pair in cache]


def reorder_rows(cache: list, order: torch.Tensor, filled: int, start: int = 0) -> list:
    """The buffers of `cache` with row i holding what row `order[i]` held, in place and over
    positions `start` to `filled` only, copying just the rows that change (a beam that keeps
    its place, as the best one mostly does, costs nothing). Beam search passes the source's
    width as `start`: the beams of one example hold the same source keys and values, and a
    beam only ever takes the place of a beam of its own example."""
    moved = (order != torch.arange(len(order), device=order.device)).nonzero().flatten()
    if len(moved):
        rows = order[moved]
        for pair in cache:
            for a in pair:
                a[moved, :, start:filled] = a[rows, :, start:filled]
    return cache


def ban_repeated_ngrams(
    logp: torch.Tensor, fed: torch.Tensor, n: int, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """`logp` (R, V) with -inf at each token that would end an n-gram already in its row of
    `fed` (R, t + 1; column 0 is the start token, which no n-gram includes): the n-1 newest
    tokens are compared with every earlier window at once. `lengths` (R,): each row's own
    length in `fed` (what follows is ignored; the lookahead's rows differ), default t + 1."""
    rows, tokens = repeated_ngrams(fed, n, lengths)
    return logp.index_put((rows, tokens), logp.new_tensor(float("-inf")))


def repeated_ngrams(
    fed: torch.Tensor, n: int, lengths: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (row, token) pairs `ban_repeated_ngrams` bans."""
    seq = fed[:, 1:]
    if lengths is None:
        lengths = torch.full_like(fed[:, 0], fed.shape[1])
    tokens = lengths - 1  # per row, the tokens of `seq` that count
    width = int(tokens.max()) if len(tokens) else 0
    if width < n:
        return seq.new_zeros(0), seq.new_zeros(0)
    seq = seq[:, :width]
    windows = seq.unfold(1, n, 1)  # (R, width - n + 1, n): every n-gram so far
    back = tokens[:, None] - n + 1 + torch.arange(n - 1, device=seq.device)
    newest = seq.gather(1, back.clamp_min(0))
    inside = torch.arange(windows.shape[1], device=seq.device)[None, :] <= (tokens - n)[:, None]
    match = (windows[:, :, :-1] == newest[:, None, :]).all(-1) & inside
    rows, at = match.nonzero(as_tuple=True)
    return rows, windows[rows, at, -1]


def ban_repeated_propositions(
    logp: torch.Tensor,
    fed: torch.Tensor,
    closers: torch.Tensor,
    lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """`logp` (R, V) with -inf at every token of `closers` in each row of `fed` (R, t + 1;
    column 0 the start token) whose open proposition (the tokens after its last closer) is not
    empty and equals a proposition the row has closed. Propositions are compared by a
    polynomial hash of their tokens and their length, all rows at once. `lengths` (R,): each
    row's own length in `fed` (what follows is ignored), default t + 1."""
    hit = repeated_proposition_rows(fed, closers, lengths)
    if len(hit):
        logp[hit[:, None], closers[None, :]] = float("-inf")
    return logp


def repeated_proposition_rows(
    fed: torch.Tensor, closers: torch.Tensor, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """The rows whose closers `ban_repeated_propositions` bans."""
    seq = fed[:, 1:]
    rows, width = seq.shape
    if width == 0:
        return seq.new_zeros(0)
    at = torch.arange(width, device=seq.device).expand(rows, -1)
    real = (
        at < (lengths[:, None] - 1)
        if lengths is not None
        else torch.ones_like(at, dtype=torch.bool)
    )
    closes = torch.isin(seq, closers) & real
    segment = closes.long().cumsum(1) - closes.long()  # a closer belongs to what it closes
    after = torch.where(closes, at + 1, 0).cummax(1).values  # first index after each closer
    start = torch.cat([after.new_zeros(rows, 1), after[:, :-1]], 1)  # of each token's segment
    powers = _powers(width, seq.device)[at - start]
    terms = torch.where(closes | ~real, 0, (seq + 1) * powers % _HASH_MOD)
    n = int(segment.max()) + 1
    hashes = seq.new_zeros(rows, n).scatter_add_(1, segment, terms) % _HASH_MOD
    sizes = seq.new_zeros(rows, n).scatter_add_(1, segment, (~closes & real).long())
    open_ = closes.long().sum(1, keepdim=True)  # the open segment's id = closers so far
    open_hash = hashes.gather(1, open_.clamp_max(n - 1))
    open_size = torch.where(open_ < n, sizes.gather(1, open_.clamp_max(n - 1)), 0)
    closed = torch.arange(n, device=seq.device)[None, :] < open_
    same = closed & (hashes == open_hash) & (sizes == open_size) & (open_size > 0)
    return same.any(1).nonzero().flatten()


def _powers(n: int, device: torch.device) -> torch.Tensor:
    """`_HASH_BASE ** i % _HASH_MOD` for i < n."""
    return _power_table(max(512, 1 << (n - 1).bit_length()), str(device))[:n]


@functools.lru_cache(maxsize=8)
def _power_table(n: int, device: str) -> torch.Tensor:
    out, p = [], 1
    for _ in range(n):
        out.append(p)
        p = p * _HASH_BASE % _HASH_MOD
    return torch.tensor(out, dtype=torch.long, device=device)


def _greedy(model: Any, src: dict, steps: int) -> torch.Tensor:
    """The plain greedy loop: one token a step for every row until all have ended (the
    reference `_greedy_rows` equals)."""
    cfg = model.config
    token = torch.full_like(src["lengths"], cfg.decoder_start_token_id)
    out, cache = token[:, None], src["cache"]
    done = torch.zeros_like(token, dtype=torch.bool)
    for t in range(steps):
        logp, cache = decode_step(model, src, cache, out, t)
        token = logp.argmax(-1).masked_fill(done, cfg.pad_token_id)
        out = torch.cat([out, token[:, None]], 1)
        done |= token == cfg.eos_token_id
        if bool(done.all()):
            break
    return out


def _take(src: dict, rows: torch.Tensor) -> dict:
    """`src` with every per-row tensor and the cache cut to `rows` (the batch's survivors)."""
    out = {n: v[rows] if torch.is_tensor(v) else v for n, v in src.items() if n != "cache"}
    out["cache"] = [(a[rows], b[rows]) for a, b in src["cache"]]
    return out


def _greedy_rows(model: Any, src: dict, steps: int, k: int) -> torch.Tensor:
    """Greedy decoding equal to `_greedy`, cheaper: each step feeds every row's last token
    and up to `k` drafted source tokens (`_propose`), verifies them in one pass through the
    cached layers (`_verify`) and keeps the drafted tokens greedy confirms and greedy's token
    after them; a row that ended is written out and, once such rows are `DROP_FRACTION` of
    the batch, they leave it."""
    cfg, n = model.config, len(src["lengths"])
    k = k if cfg.use_copy else 0  # drafts are confirmed through the copy head
    out = src["lengths"].new_full((n, steps + 1), cfg.pad_token_id)
    seq = src["lengths"].new_full((n, steps + k + 2), cfg.pad_token_id)  # room for a draft
    out[:, 0] = seq[:, 0] = cfg.decoder_start_token_id
    count = torch.ones_like(src["lengths"])  # each row's tokens so far, the start included
    alive = torch.arange(n, device=seq.device)  # the batch's rows among the inputs
    live = torch.ones_like(count, dtype=torch.bool)  # not ended yet
    while steps > 0 and len(alive):
        drafts = _propose(src, seq, count, k, cfg.pad_token_id) if k else None
        tokens = seq.gather(1, count[:, None] - 1)  # the last token, not yet fed
        if drafts is not None:
            seq.scatter_(1, count[:, None] + torch.arange(k, device=seq.device), drafts)
            tokens = torch.cat([tokens, drafts], 1)  # the rules and the history read them
        m, new = _verify(model, src, seq, count, tokens)
        m = torch.where(live, torch.minimum(m, steps + 1 - count), 0)
        slots = count[:, None] + torch.arange(new.shape[1], device=seq.device)
        keep = torch.arange(new.shape[1], device=seq.device)[None, :] < m[:, None]
        seq.scatter_(1, slots, torch.where(keep, new, seq.gather(1, slots)))
        if "coverage" in src:  # the coverage after the positions greedy would have fed
            trace = src.pop("coverage_trace")
            src["coverage"] = trace[torch.arange(len(m)), (m - 1).clamp_min(0)]
        count = count + m
        last = seq.gather(1, count[:, None] - 1)[:, 0]
        ended = live & ((last == cfg.eos_token_id) | (count > steps))
        if bool(ended.any()):
            cols = torch.arange(steps + 1, device=seq.device)[None, :]
            row = seq[ended, : steps + 1]
            out[alive[ended]] = torch.where(cols < count[ended, None], row, cfg.pad_token_id)
            live = live & ~ended
        dead = int((~live).sum())
        if dead == len(alive):
            break
        if dead and dead >= DROP_FRACTION * len(alive):
            rows = live.nonzero().flatten()
            src, seq, count = _take(src, rows), seq[rows], count[rows]
            alive, live = alive[rows], live[rows]
    width = int((out != cfg.pad_token_id).sum(1).max()) if n else 1
    return out[:, : max(width, 1)]


def _propose(
    src: dict, seq: torch.Tensor, count: torch.Tensor, k: int, pad: int
) -> torch.Tensor | None:
    """Each row's draft (R, k): the `k` source tokens after the source position whose
    preceding tokens match the row's newest tokens longest (the copy head's own n-gram
    match, `src["before"]`; the first such position), `pad` (never greedy's choice) where a
    row has no match or the source ends; None when no row has one."""
    n = src["before"].shape[-1]
    back = (count - 1)[:, None] - torch.arange(n, device=seq.device)  # the newest token first
    history = torch.where(back >= 0, seq.gather(1, back.clamp_min(0)), -1)
    run = (src["before"] == history[:, None, :]).long().cumprod(-1).sum(-1)  # (R, S - 1)
    run = run.masked_fill(~src["copy_valid"], 0)
    longest, at = run.max(1).values, run.argmax(1)
    if not bool((longest > 0).any()):
        return None
    last = src["copy_ids"].shape[1] - 1
    pos = (at[:, None] + torch.arange(k, device=seq.device)).clamp_max(last)
    ok = src["copy_valid"].gather(1, pos) & (longest > 0)[:, None]
    ok &= at[:, None] + torch.arange(k, device=seq.device) <= last
    return torch.where(ok, src["copy_ids"].gather(1, pos), pad)


def _verify(
    model: Any, src: dict, seq: torch.Tensor, count: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Feed `tokens` (R, T: each row's last token, then its draft) at each row's own next
    positions through the cached layers and take greedy's token after each (the mixture and
    the decoding rules as each position would meet them one step at a time). Returns how many
    new tokens each row gets (R,): the drafted ones greedy confirms, in order, and greedy's
    token after them, up to the first end token; and those tokens (R, T)."""
    cfg = model.config
    r, t = tokens.shape
    h, history = _feed(model, src, seq, count, tokens)
    logp = model.next_log_probs(h, src, history)  # (R, T, V)
    best = torch.stack(
        [apply_rules(model, src, logp[:, j], seq, count + j).argmax(-1) for j in range(t)], 1
    )
    m = (best[:, :-1] == tokens[:, 1:]).long().cumprod(1).sum(1) + 1
    cols = torch.arange(t, device=seq.device)[None, :]
    ends = (best == cfg.eos_token_id) & (cols < m[:, None])
    return torch.where(ends.any(1), ends.int().argmax(1) + 1, m), best


def _feed(
    model: Any, src: dict, seq: torch.Tensor, count: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The target states (R, T, h) of `tokens` fed at each row's next positions (the cache in
    `src` updated) and the copy head's history of each (R, T, NGRAM)."""
    cfg = model.config
    r, t = tokens.shape
    width = src["valid"].shape[1]
    ahead = torch.arange(t, device=seq.device)
    at = width + count - 1  # each row's slot for its last token
    pos = (src["lengths"] + count - 1)[:, None] + ahead
    x = model.embed(tokens, pos.clamp_max(cfg.max_position_embeddings - 1), cfg.target_token_type)
    keys = int(at.max()) + t
    slot = torch.arange(keys, device=seq.device)[None, None, :]
    target = (slot >= width) & (slot <= at[:, None, None] + ahead[None, :, None])
    source = F.pad(src["valid"], (0, keys - width))[:, None, :]
    cache = with_room(src["cache"], keys)
    h, src["cache"] = model.run_layers(x, (target | source)[:, None], cache, at)
    n = src["before"].shape[-1]
    back = (count - 1)[:, None, None] + ahead[None, :, None] - torch.arange(n, device=seq.device)
    history = seq.gather(1, back.clamp_min(0).view(r, -1)).view(r, t, n)
    return h, torch.where(back >= 0, history, -1)


def _expand(src: dict, k: int) -> dict:
    """Every source tensor (and cache) repeated `k` times per row (one per beam)."""
    out = {n: v.repeat_interleave(k, 0) for n, v in src.items() if torch.is_tensor(v)}
    out["cache"] = [(a.repeat_interleave(k, 0), b.repeat_interleave(k, 0)) for a, b in src["cache"]]
    out.update({n: v for n, v in src.items() if n != "cache" and not torch.is_tensor(v)})
    return out


def _beam(model: Any, src: dict, steps: int, k: int, drop_finished: bool = True) -> torch.Tensor:
    """Beam search of width `k`; with `drop_finished`, an example whose search has ended
    leaves the batch (its `k` rows) once such rows are `DROP_FRACTION` of it."""
    cfg, n = model.config, len(src["lengths"])
    src = _expand(src, k)
    scores = torch.full((n, k), float("-inf"), device=src["lengths"].device)
    scores[:, 0] = 0.0  # one live beam at the start (the others would be its copies)
    seqs = torch.full((n * k, 1), cfg.decoder_start_token_id, device=scores.device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    done = [False] * n
    alive = list(range(n))  # the examples in the batch, in its order
    for t in range(steps):
        logp, src["cache"] = decode_step(model, src, src["cache"], seqs, t)
        cand = (scores.reshape(-1, 1) + logp).reshape(len(alive), -1)
        top, idx = cand.topk(2 * k, dim=1)
        choice = _select(top, idx, logp.shape[-1], k, seqs, finished, done, t + 1, cfg, alive)
        scores, beams, tokens = choice
        base = torch.arange(len(alive), device=seqs.device)[:, None] * k
        reorder = (base + beams).reshape(-1)
        seqs = torch.cat([seqs[reorder], tokens.reshape(-1, 1)], 1)
        width = src["valid"].shape[1]  # the source's positions: the same in every beam
        src["cache"] = reorder_rows(src["cache"], reorder, width + t + 1, start=width)
        if "coverage" in src:
            src["coverage"] = src["coverage"][reorder]
        if all(done):
            break
        ended = [done[e] for e in alive]
        if drop_finished and sum(ended) and sum(ended) >= DROP_FRACTION * len(alive):
            keep = [i for i, e in enumerate(ended) if not e]
            rows = torch.tensor([i * k + j for i in keep for j in range(k)], device=seqs.device)
            src, seqs, scores = _take(src, rows), seqs[rows], scores[keep]
            alive = [alive[i] for i in keep]
    return _best(seqs, scores, finished, k, cfg, alive)


def _select(top, idx, vocab, k, seqs, finished, done, length, cfg, alive) -> tuple:
    """One beam step's bookkeeping for the batch's examples `alive` (their ids in `finished`
    and `done`): candidates ending with `[SEP]` among the top `k` go to `finished` (score /
    length); the best `k` others live on. Returns the new scores, the beams they extend and
    their tokens (a finished example keeps dead beams until it leaves the batch)."""
    n = top.shape[0]
    scores = torch.full((n, k), float("-inf"), device=top.device)
    beams = torch.zeros((n, k), dtype=torch.long, device=top.device)
    tokens = torch.full((n, k), cfg.pad_token_id, dtype=torch.long, device=top.device)
    for i, (row, ids) in enumerate(zip(top.tolist(), idx.tolist())):
        b = alive[i]
        if done[b]:
            continue
        live = 0
        for j, (score, flat) in enumerate(zip(row, ids)):
            beam, token = divmod(flat, vocab)
            if token == cfg.eos_token_id:
                if j < k and score > float("-inf"):
                    seq = seqs[i * k + beam].tolist() + [token]
                    finished[b] = sorted([*finished[b], (score / length, seq)], reverse=True)[:k]
                continue
            scores[i, live], beams[i, live], tokens[i, live] = score, beam, token
            live += 1
            if live == k:
                break
        best_live = scores[i, 0].item() / length
        done[b] = len(finished[b]) >= k and finished[b][-1][0] >= best_live
    return scores, beams, tokens


def _best(
    seqs: torch.Tensor, scores: torch.Tensor, finished: list, k: int, cfg: Any, alive: list
) -> torch.Tensor:
    """The best hypothesis of each example (a live beam where none finished: the examples
    still in the batch, `alive`), padded."""
    length = seqs.shape[1] - 1
    rows = []
    place = {e: i for i, e in enumerate(alive)}
    for b, hyps in enumerate(finished):
        if not hyps:
            i = place[b]
            hyps = [(scores[i, 0].item() / max(length, 1), seqs[i * k].tolist())]
        rows.append(hyps[0][1])
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), cfg.pad_token_id, dtype=torch.long, device=seqs.device)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out

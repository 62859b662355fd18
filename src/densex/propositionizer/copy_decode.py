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
that goes on.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["ban_repeated_propositions", "ban_repeated_ngrams", "decode", "decode_step"]

_HASH_BASE, _HASH_MOD = 1_000_003, 2_147_483_647  # products stay far below 2**63


def decode(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
    num_beams: int = 1,
    no_repeat_ngram_size: int | None = None,
    coverage_penalty: float | None = None,
    no_repeat_proposition: bool | None = None,
) -> torch.Tensor:
    """Generated ids (B, 1 + n) for each source row (module docstring)."""
    src = model.encode_source(input_ids, attention_mask)
    src["no_repeat"] = int(no_repeat_ngram_size or 0)
    if no_repeat_proposition:
        cfg = model.config
        src["closers"] = (cfg.prop_token_id, cfg.eos_token_id)  # not a tensor: not per row
    if coverage_penalty:  # the copy attention summed over the steps so far, per candidate
        src["coverage"] = torch.zeros(src["copy_ids"].shape, device=input_ids.device)
        src["coverage_penalty"] = float(coverage_penalty)
    room = int(model.config.max_position_embeddings - src["lengths"].max())
    steps = max(0, min(max_new_tokens, room))
    out = _beam(model, src, steps, num_beams) if num_beams > 1 else _greedy(model, src, steps)
    if steps < max_new_tokens and out.shape[1] == steps + 1:  # cut by the position budget
        pad = out.new_full((out.shape[0], max_new_tokens - steps), model.config.pad_token_id)
        out = torch.cat([out, pad], 1)
    return out


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
    banned = [model.config.pad_token_id, model.config.decoder_start_token_id]
    logp[:, banned] = float("-inf")
    if src.get("no_repeat", 0) > 1:
        logp = ban_repeated_ngrams(logp, fed, src["no_repeat"])
    if "closers" in src:
        logp = ban_repeated_propositions(logp, fed, fed.new_tensor(src["closers"]))
    return logp, cache


def with_room(cache: list, need: int) -> list:
    """The per-layer (key, value) buffers of `cache`, grown (doubled, at least to `need`
    positions, the filled ones copied) when they hold fewer than `need`: appending a step
    then costs no copy."""
    have = cache[0][0].shape[2]
    if have >= need:
        return cache
    size = max(need, 2 * have)

    def grow(a: torch.Tensor) -> torch.Tensor:
        b = a.new_empty(*a.shape[:2], size, a.shape[3])
        b[:, :, :have] = a
        return b

    return [tuple(grow(a) for a in pair) for pair in cache]


def reorder_rows(cache: list, order: torch.Tensor, filled: int) -> list:
    """The buffers of `cache` with row i holding what row `order[i]` held, in place and over
    the first `filled` positions only, copying just the rows that change (a beam that keeps
    its place, as the best one mostly does, costs nothing)."""
    moved = (order != torch.arange(len(order), device=order.device)).nonzero().flatten()
    if len(moved):
        rows = order[moved]
        for pair in cache:
            for a in pair:
                a[moved, :, :filled] = a[rows, :, :filled]
    return cache


def ban_repeated_ngrams(logp: torch.Tensor, fed: torch.Tensor, n: int) -> torch.Tensor:
    """`logp` (R, V) with -inf at each token that would end an n-gram already in its row of
    `fed` (R, t + 1; column 0 is the start token, which no n-gram includes): the n-1 newest
    tokens are compared with every earlier window at once."""
    seq = fed[:, 1:]
    if seq.shape[1] < n:
        return logp
    windows = seq.unfold(1, n, 1)  # (R, t - n + 1, n): every n-gram so far
    match = (windows[:, :, :-1] == seq[:, None, 1 - n :]).all(-1)
    rows, at = match.nonzero(as_tuple=True)
    return logp.index_put((rows, windows[rows, at, -1]), logp.new_tensor(float("-inf")))


def ban_repeated_propositions(
    logp: torch.Tensor, fed: torch.Tensor, closers: torch.Tensor
) -> torch.Tensor:
    """`logp` (R, V) with -inf at every token of `closers` in each row of `fed` (R, t + 1;
    column 0 the start token) whose open proposition (the tokens after its last closer) is not
    empty and equals a proposition the row has closed. Propositions are compared by a
    polynomial hash of their tokens and their length, all rows at once."""
    seq = fed[:, 1:]
    rows, width = seq.shape
    if width == 0:
        return logp
    closes = torch.isin(seq, closers)
    segment = closes.long().cumsum(1) - closes.long()  # a closer belongs to what it closes
    at = torch.arange(width, device=seq.device).expand(rows, -1)
    after = torch.where(closes, at + 1, 0).cummax(1).values  # first index after each closer
    start = torch.cat([after.new_zeros(rows, 1), after[:, :-1]], 1)  # of each token's segment
    powers = _powers(width, seq.device)[at - start]
    terms = torch.where(closes, 0, (seq + 1) * powers % _HASH_MOD)
    n = int(segment.max()) + 1
    hashes = seq.new_zeros(rows, n).scatter_add_(1, segment, terms) % _HASH_MOD
    sizes = seq.new_zeros(rows, n).scatter_add_(1, segment, (~closes).long())
    open_ = closes.long().sum(1, keepdim=True)  # the open segment's id = closers so far
    open_hash = hashes.gather(1, open_.clamp_max(n - 1))
    open_size = torch.where(open_ < n, sizes.gather(1, open_.clamp_max(n - 1)), 0)
    closed = torch.arange(n, device=seq.device)[None, :] < open_
    same = closed & (hashes == open_hash) & (sizes == open_size) & (open_size > 0)
    hit = same.any(1).nonzero().flatten()
    if len(hit):
        logp[hit[:, None], closers[None, :]] = float("-inf")
    return logp


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


def _expand(src: dict, k: int) -> dict:
    """Every source tensor (and cache) repeated `k` times per row (one per beam)."""
    out = {n: v.repeat_interleave(k, 0) for n, v in src.items() if torch.is_tensor(v)}
    out["cache"] = [(a.repeat_interleave(k, 0), b.repeat_interleave(k, 0)) for a, b in src["cache"]]
    out.update({n: v for n, v in src.items() if n != "cache" and not torch.is_tensor(v)})
    return out


def _beam(model: Any, src: dict, steps: int, k: int) -> torch.Tensor:
    cfg, n = model.config, len(src["lengths"])
    src = _expand(src, k)
    cache = src["cache"]
    scores = torch.full((n, k), float("-inf"), device=src["lengths"].device)
    scores[:, 0] = 0.0  # one live beam at the start (the others would be its copies)
    seqs = torch.full((n * k, 1), cfg.decoder_start_token_id, device=scores.device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    done = [False] * n
    for t in range(steps):
        logp, cache = decode_step(model, src, cache, seqs, t)
        cand = (scores.reshape(-1, 1) + logp).reshape(n, -1)
        top, idx = cand.topk(2 * k, dim=1)
        choice = _select(top, idx, logp.shape[-1], k, seqs, finished, done, t + 1, cfg)
        scores, beams, tokens = choice
        reorder = (torch.arange(n, device=seqs.device)[:, None] * k + beams).reshape(-1)
        seqs = torch.cat([seqs[reorder], tokens.reshape(-1, 1)], 1)
        cache = reorder_rows(cache, reorder, src["valid"].shape[1] + t + 1)
        if "coverage" in src:
            src["coverage"] = src["coverage"][reorder]
        if all(done):
            break
    return _best(seqs, scores, finished, k, cfg)


def _select(top, idx, vocab, k, seqs, finished, done, length, cfg) -> tuple:
    """One beam step's bookkeeping: candidates ending with `[SEP]` among the top `k` go to
    `finished` (score / length); the best `k` others live on. Returns the new scores, the
    beams they extend and their tokens (a finished example keeps dead beams)."""
    n = top.shape[0]
    scores = torch.full((n, k), float("-inf"), device=top.device)
    beams = torch.zeros((n, k), dtype=torch.long, device=top.device)
    tokens = torch.full((n, k), cfg.pad_token_id, dtype=torch.long, device=top.device)
    for b, (row, ids) in enumerate(zip(top.tolist(), idx.tolist())):
        if done[b]:
            continue
        live = 0
        for j, (score, flat) in enumerate(zip(row, ids)):
            beam, token = divmod(flat, vocab)
            if token == cfg.eos_token_id:
                if j < k and score > float("-inf"):
                    seq = seqs[b * k + beam].tolist() + [token]
                    finished[b] = sorted([*finished[b], (score / length, seq)], reverse=True)[:k]
                continue
            scores[b, live], beams[b, live], tokens[b, live] = score, beam, token
            live += 1
            if live == k:
                break
        best_live = scores[b, 0].item() / length
        done[b] = len(finished[b]) >= k and finished[b][-1][0] >= best_live
    return scores, beams, tokens


def _best(
    seqs: torch.Tensor, scores: torch.Tensor, finished: list, k: int, cfg: Any
) -> torch.Tensor:
    """The best hypothesis of each example (a live beam where none finished), padded."""
    length = seqs.shape[1] - 1
    rows = []
    for b, hyps in enumerate(finished):
        if not hyps:
            hyps = [(scores[b, 0].item() / max(length, 1), seqs[b * k].tolist())]
        rows.append(hyps[0][1])
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), cfg.pad_token_id, dtype=torch.long, device=seqs.device)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out

"""The copy student's cheaper decoding (`copy_decode.py`) writes exactly the tokens of the plain
loop: greedy with finished rows dropped and with copy-span lookahead, beam search with finished
examples dropped, with and without the decoding rules, on real squad-open passages per sentence
(the passage's earlier sentences as context, as the pipeline builds them). Each of those checks
is shown able to fail: with its step broken on purpose, the same comparison finds the change."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import densex.propositionizer.copy_decode as copy_decode
from densex.propositionizer.backbone import load_seq2seq
from densex.propositionizer.content_pieces import content_vocab
from densex.propositionizer.output import passage_source
from densex.propositionizer.sentence_inputs import sentence_units

RULES = {
    "none": {},
    "all": {"coverage_penalty": 2.0, "no_repeat_proposition": True, "no_repeat_ngram_size": 3},
}


@pytest.fixture(scope="module")
def student(copy_lm_dir: str):
    from transformers import AutoTokenizer

    path = copy_lm_dir  # cached_copy_lm(..., encoder=minilm_path): the session's
    return load_seq2seq(path).eval(), AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def batch(student, squad_open: Path):
    """Eight per-sentence inputs of the first squad-open passages, their lengths mixed."""
    lines = (squad_open / "passages.jsonl").open(encoding="utf-8")
    passages = [json.loads(line) for _, line in zip(range(3), lines)]
    split = lambda texts: (re.split(r"(?<=[.!?])\s+", t.strip()) for t in texts)  # noqa: E731
    units, _ = sentence_units(passages, split, -1)
    sources = [passage_source(u) for u in units][:8]
    return student[1](sources, return_tensors="pt", padding=True)


def _generate(model, enc, **kw):
    with torch.no_grad():
        return model.generate(**enc, max_new_tokens=30, **kw)


@pytest.fixture(scope="module")
def reference(student, batch):
    """`reference(path, rules)`: the plain loop's ids ("greedy" or "beam" 2, every row computed
    to the end), generated once per module for each (path, rules) and shared by the checks."""
    done: dict[tuple[str, str], torch.Tensor] = {}

    def get(path: str, rules: str) -> torch.Tensor:
        if (path, rules) not in done:
            kw = {"lookahead": 0} if path == "greedy" else {"num_beams": 2}
            done[path, rules] = _generate(
                student[0], batch, drop_finished=False, **kw, **RULES[rules]
            )
        return done[path, rules]

    return get


@pytest.fixture(scope="module")
def beam_dropped(student, batch):
    """`beam_dropped(rules)`: beam search (2 beams) with finished examples dropped, the
    default path, unpatched; generated once per module for each rules set and shared."""
    done: dict[str, torch.Tensor] = {}

    def get(rules: str) -> torch.Tensor:
        if rules not in done:
            done[rules] = _generate(student[0], batch, num_beams=2, **RULES[rules])
        return done[rules]

    return get


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The exactness checks' comparison: the same shape and the same token ids."""
    return a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("rules", sorted(RULES))
def test_greedy_lookahead_and_row_dropping_write_plain_greedys_tokens(
    student, batch, rules, reference
):
    model = student[0]
    plain = reference("greedy", rules)
    ended = (plain[:, 1:] == model.config.eos_token_id).any(1)
    assert 0 < int(ended.sum()) < len(plain)  # some rows end early, some run to the limit
    for k in (0, 8):  # 0: rows dropped only
        fast = _generate(model, batch, lookahead=k, **RULES[rules])
        assert _same(fast, plain), (k, rules)


def test_lookahead_verifies_several_tokens_per_pass(student, batch, monkeypatch):
    """The drafts are accepted: far fewer passes than generated tokens."""
    calls = []
    verify = copy_decode._verify

    def spy(model, src, seq, count, tokens):
        calls.append(tokens.shape[1])
        return verify(model, src, seq, count, tokens)

    monkeypatch.setattr(copy_decode, "_verify", spy)
    out = _generate(student[0], batch, lookahead=8)
    assert max(calls) == 9 and len(calls) < out.shape[1] / 2


@pytest.mark.parametrize("rules", ["none", "all"])
def test_beam_search_dropping_finished_examples_writes_the_same_tokens(
    student, batch, rules, reference, beam_dropped
):
    kept = reference("beam", rules)
    dropped = beam_dropped(rules)  # _generate(model, batch, num_beams=2, **RULES[rules])
    assert _same(dropped, kept)


# ---- the checks above can fail: each step broken on purpose -----------------------------------


def _rows_rolled(monkeypatch) -> list[int]:
    """`copy_decode._take` broken: the survivors' source rows and cache rolled by one (row i
    gets row i - 1's), while the caller's own per-row state (tokens so far, scores) stays
    right. Returns the number of rows of each call (a roll of one row would change nothing)."""
    take, calls = copy_decode._take, []

    def rolled(src, rows):
        calls.append(len(rows))
        return take(src, rows.roll(1))

    monkeypatch.setattr(copy_decode, "_take", rolled)
    return calls


@pytest.mark.parametrize("rules", sorted(RULES))
def test_row_dropping_check_fails_when_the_wrong_rows_are_kept(
    student, batch, rules, reference, monkeypatch
):
    """Breaking what greedy keeps when it drops finished rows changes its tokens, so the
    exactness check above reads the rows dropping keeps. It does drop: one ended row is
    DROP_FRACTION of the 8 (without rules one row ends, at step 28 of 30, and 7 survive; with
    them three rows end and the batch is cut three times)."""
    model = student[0]
    plain = reference("greedy", rules)
    calls = _rows_rolled(monkeypatch)
    broken = _generate(model, batch, lookahead=0, **RULES[rules])
    assert calls and min(calls) > 1  # the sabotage ran, on more than one surviving row
    assert not _same(broken, plain)


@pytest.mark.parametrize("rules", sorted(RULES))
def test_lookahead_check_fails_when_one_unconfirmed_token_is_accepted(
    student, batch, rules, reference, monkeypatch
):
    """Accepting one drafted position more than greedy confirms (the token greedy would write
    after a rejected draft token) changes the output, so the exactness check above reads
    what lookahead accepts, not merely that it runs."""
    model = student[0]
    plain = reference("greedy", rules)
    verify, stretched = copy_decode._verify, []

    def one_more(model, src, seq, count, tokens):
        m, new = verify(model, src, seq, count, tokens)
        more = (m + 1).clamp_max(tokens.shape[1])
        stretched.append(int((more > m).sum()))
        return more, new

    monkeypatch.setattr(copy_decode, "_verify", one_more)
    broken = _generate(model, batch, lookahead=8, **RULES[rules])
    assert sum(stretched) > 0  # some row had a draft greedy rejected
    assert not _same(broken, plain)


@pytest.mark.parametrize("rules", sorted(RULES))
def test_beam_dropping_check_fails_when_the_wrong_rows_are_kept(
    student, batch, rules, reference, monkeypatch
):
    """Beam search with the finished examples' rows dropped, the survivors' cache rolled by one
    row (a beam reads another beam's, or another example's, source): the tokens change, so the
    beam exactness check above reads the rows dropping keeps."""
    model = student[0]
    kept = reference("beam", rules)
    calls = _rows_rolled(monkeypatch)
    broken = _generate(model, batch, num_beams=2, **RULES[rules])
    assert calls and min(calls) > 1
    assert not _same(broken, kept)


def test_beam_search_moves_only_the_targets_positions(student, batch, monkeypatch, beam_dropped):
    """Beam search reorders only the target positions of the cache (the beams of one example
    share its source's keys and values): the same tokens as reordering every position, and
    different ones when the target positions are not moved either (the check can fail)."""
    model = student[0]
    fast = beam_dropped("all")  # _generate(model, batch, num_beams=2, **RULES["all"]), unpatched
    reorder = copy_decode.reorder_rows

    def every_position(cache, order, filled, start=0):
        return reorder(cache, order, filled, 0)

    monkeypatch.setattr(copy_decode, "reorder_rows", every_position)
    assert _same(_generate(model, batch, num_beams=2, **RULES["all"]), fast)

    def none(cache, order, filled, start=0):
        return reorder(cache, order, filled, filled)

    monkeypatch.setattr(copy_decode, "reorder_rows", none)
    assert not _same(_generate(model, batch, num_beams=2, **RULES["all"]), fast)


def test_the_cheaper_paths_keep_the_end_and_context_rules(student, batch, reference):
    """The end penalty (its budget included) and the context penalty under greedy lookahead,
    row dropping and beam search's dropping: the plain loop's tokens. (On this untrained head
    the context penalty at 5 is what changes the tokens; its rows end before the end rules
    bite.)"""
    model = student[0]
    rules = dict(
        end_penalty=5.0, content_vocab=content_vocab(student[1]),
        context_penalty=5.0, coverage_penalty=2.0, no_repeat_proposition=True,
    )  # fmt: skip
    plain = _generate(model, batch, lookahead=0, drop_finished=False, **rules)
    # the plain loop without rules (lookahead 0, no dropping): the module's reference
    assert not _same(plain, reference("greedy", "none"))
    for k in (0, 8):
        assert _same(_generate(model, batch, lookahead=k, **rules), plain), k
    kept = _generate(model, batch, num_beams=2, drop_finished=False, **rules)
    assert _same(_generate(model, batch, num_beams=2, **rules), kept)

"""The copy-aware student propositionizer (`model=minilm-copy`): its targets, its decoding and
its copy head, on real squad-open sentences and the packaged MiniLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from densex.propositionizer.backbone import load_seq2seq, output_decoder, target_ids
from densex.propositionizer.copy_decode import (
    ban_repeated_ngrams,
    ban_repeated_propositions,
    decode,
    decode_step,
)
from densex.propositionizer.copy_lm import coverage_loss
from densex.propositionizer.generator import PropositionGenerator
from densex.propositionizer.module import set_dropout
from densex.propositionizer.pairs import format_target


@pytest.fixture(scope="module")
def copy_dir(copy_lm_dir: str) -> str:
    """`cached_copy_lm(..., encoder=minilm_path)`: the session's `copy_lm_dir` (conftest)."""
    return copy_lm_dir


@pytest.fixture(scope="module")
def sentences(squad_open: Path) -> list[str]:
    return load_sentences(squad_open)


def load_sentences(squad_open: Path) -> list[str]:
    """Sentences of 6-14 words from the first squad-open passages, in file order."""
    out = []
    for line in (squad_open / "passages.jsonl").open(encoding="utf-8"):
        for s in re.split(r"(?<=\.)\s+", json.loads(line)["text"]):
            if 6 <= len(s.split()) <= 14 and s.endswith("."):
                out.append(s)
        if len(out) >= 220:
            return out
    return out


def _batch(tok, sources, targets):
    enc = tok(sources, return_tensors="pt", padding=True)
    labels = target_ids(tok, targets)
    lab = torch.full((len(labels), max(map(len, labels))), -100)
    for i, x in enumerate(labels):
        lab[i, : len(x)] = torch.tensor(x)
    return enc, lab


def test_targets_are_prop_separated_and_decode_to_the_source_surface(copy_dir, sentences):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(copy_dir)
    source = sentences[0] + " " + sentences[1]
    target = format_target([sentences[1], sentences[0]])
    (ids,) = target_ids(tok, [target])
    prop = tok.convert_tokens_to_ids("[PROP]")
    assert ids.count(prop) == 1 and ids[-1] == tok.sep_token_id
    assert tok.cls_token_id not in ids
    generated = torch.tensor([[tok.cls_token_id, *ids, tok.pad_token_id]])
    (text,) = output_decoder(tok)(generated, [source])
    # uncased ids, but the source's casing and spacing come back through the offsets
    assert json.loads(text) == [sentences[1], sentences[0]]
    assert text != text.lower()


def test_incremental_decoding_scores_equal_the_teacher_forced_loss(copy_dir, sentences):
    from transformers import AutoTokenizer

    model, tok = load_seq2seq(copy_dir).eval(), AutoTokenizer.from_pretrained(copy_dir)
    enc, lab = _batch(tok, sentences[:2], [format_target([s]) for s in sentences[2:4]])
    with torch.no_grad():
        loss = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=lab).loss
        src = model.encode_source(enc.input_ids, enc.attention_mask)
        inputs, cache, nll = model.prepare_decoder_input_ids_from_labels(lab), src["cache"], []
        for t in range(lab.shape[1]):
            logp, cache = decode_step(model, src, cache, inputs[:, : t + 1], t)
            nll += [-logp[b, lab[b, t]] for b in range(2) if lab[b, t] != -100]
    assert float(loss) == pytest.approx(float(torch.stack(nll).mean()), rel=1e-4)
    greedy = decode(model, enc.input_ids, enc.attention_mask, 8, num_beams=1)
    beam = decode(model, enc.input_ids, enc.attention_mask, 8, num_beams=3)
    assert (
        greedy.shape == (2, 9) and beam.shape[0] == 2 and (greedy[:, 0] == tok.cls_token_id).all()
    )


def test_ban_repeated_ngrams_bans_the_token_that_would_repeat_an_ngram():
    fed = torch.tensor([[101, 5, 6, 7, 5, 6], [101, 1, 2, 3, 4, 1]])  # column 0: start token
    logp = torch.zeros(2, 10)
    banned = [
        torch.isinf(row).nonzero().flatten().tolist() for row in ban_repeated_ngrams(logp, fed, 3)
    ]
    assert banned == [[7], []]  # "5 6" was followed by 7; "4 1" is new
    banned = [
        torch.isinf(row).nonzero().flatten().tolist() for row in ban_repeated_ngrams(logp, fed, 2)
    ]
    assert banned == [[7], [2]]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_decoding_with_no_repeat_ngram_size_repeats_no_ngram(copy_dir, sentences, num_beams):
    """The untrained student copies its source (the copy head starts as identity matching), so
    a source that says its sentence twice comes back with repeats; with the rule no bigram
    comes twice."""
    from transformers import AutoTokenizer

    model, tok = load_seq2seq(copy_dir).eval(), AutoTokenizer.from_pretrained(copy_dir)
    enc = tok([f"{s} {s}" for s in sentences[:2]], return_tensors="pt", padding=True)
    with torch.no_grad():
        free = model.generate(enc.input_ids, enc.attention_mask, 40, num_beams)
        ruled = model.generate(enc.input_ids, enc.attention_mask, 40, num_beams, 2)

    def repeats(row: list[int]) -> int:
        row = [t for t in row[1:] if t != tok.pad_token_id]
        grams = list(zip(row, row[1:]))
        return len(grams) - len(set(grams))

    assert max(repeats(r) for r in free.tolist()) > 0
    assert max(repeats(r) for r in ruled.tolist()) == 0


def train_on_copies(copy_dir: str, sentences: list[str], use_copy: bool, steps: int = 8):
    """The student after `steps` AdamW steps (lr 3e-4) of 4 pairs whose target is the source
    itself."""
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    model, tok = load_seq2seq(copy_dir), AutoTokenizer.from_pretrained(copy_dir)
    model.config.use_copy = use_copy
    set_dropout(model, 0.0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for s in range(steps):
        part = sentences[s * 4 : (s + 1) * 4]
        enc, lab = _batch(tok, part, [format_target([x]) for x in part])
        model(
            input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=lab
        ).loss.backward()
        opt.step()
        opt.zero_grad()
    return model.eval(), tok


def test_the_copy_head_learns_to_copy_held_out_sources_exactly(copy_dir, sentences, tmp_path):
    """Eight steps on source -> [source] pairs: held-out sources (never trained on, with their
    own names and casing) come back exactly, through the exported directory and the pipeline's
    generator. With the copy head disabled (`use_copy=False`) this test fails: the same
    training then reproduces none of them (it writes "the the the ...").
    (11 of these 12: "The chloroplastidan chloroplasts, or green chloroplasts, ... primary
    chloroplast lineage." repeats its wordpieces so often that greedy decoding loops.)"""
    held = sentences[-12:]
    model, tok = train_on_copies(copy_dir, sentences[:-12], use_copy=True)
    model.save_pretrained(tmp_path / "export")
    tok.save_pretrained(tmp_path / "export")
    gen = PropositionGenerator(str(tmp_path / "export"), batch_size=6, max_new_tokens=40)
    texts, cut = gen.generate(held)
    exact = [json.loads(t) == [s] for t, s in zip(texts, held)]
    assert sum(exact) >= 11, [t for t, ok in zip(texts, exact) if not ok]
    assert sum(cut) <= 1


def test_ban_repeated_propositions_bans_closing_a_proposition_written_before():
    prop, sep = 9, 8
    fed = torch.tensor(
        [
            [101, 5, 6, prop, 5, 6],  # "5 6" again: closing it is banned
            [101, 5, 6, prop, 5, 7],  # new
            [101, 5, 6, prop, 6, 5],  # the same tokens in another order: new
            [101, 5, 6, prop, 7, prop],  # nothing open yet
            [101, 6, prop, 5, 6, 6],  # "6" is the tail of the open one, not all of it
        ]
    )
    logp = ban_repeated_propositions(torch.zeros(5, 10), fed, torch.tensor([prop, sep]))
    assert [torch.isinf(r).nonzero().flatten().tolist() for r in logp] == [[8, 9], [], [], [], []]
    fed = torch.tensor([[101, 5, 6, prop, 7, prop, 5, 6]])  # an earlier one, not the last
    logp = ban_repeated_propositions(torch.zeros(1, 10), fed, torch.tensor([prop, sep]))
    assert torch.isinf(logp).nonzero()[:, 1].tolist() == [8, 9]


@pytest.mark.parametrize("num_beams", [1, 2])
def test_no_repeat_proposition_reaches_every_decoding_step(
    copy_dir, sentences, num_beams, monkeypatch
):
    """`propositionizer.no_repeat_proposition` goes from the generator through `generate` to
    every decoding step, with the student's `[PROP]` and `[SEP]` as the closing tokens."""
    import densex.propositionizer.copy_decode as copy_decode

    seen = []

    def spy(logp, fed, closers, lengths=None):
        seen.append((fed.shape, closers.tolist()))
        return ban_repeated_propositions(logp, fed, closers, lengths)

    monkeypatch.setattr(copy_decode, "ban_repeated_propositions", spy)
    gen = PropositionGenerator(copy_dir, batch_size=2, max_new_tokens=6, num_beams=num_beams)
    gen.generate(sentences[:2])
    assert seen == []
    ruled = PropositionGenerator(
        copy_dir, batch_size=2, max_new_tokens=6, num_beams=num_beams, no_repeat_proposition=True
    )
    ruled.generate(sentences[:2])
    cfg = ruled.model.config
    assert seen and {tuple(c) for _, c in seen} == {(cfg.prop_token_id, cfg.eos_token_id)}
    if num_beams > 1:  # greedy's lookahead checks several positions a pass (copy_decode)
        assert len(seen) == 6
        assert seen[0][0] == (2 * num_beams, 1) and seen[-1][0] == (2 * num_beams, 6)


def test_coverage_loss_counts_attention_to_already_covered_source_positions():
    w = torch.tensor([[[1.0, 0, 0], [0, 1.0, 0], [0.5, 0, 0.5]]])  # step 3 half on position 0
    assert float(coverage_loss(w, torch.ones(1, 3, dtype=torch.bool))) == pytest.approx(0.5 / 3)
    # an ignored position neither pays nor adds to the coverage
    keep = torch.tensor([[True, False, True]])
    w2 = torch.tensor([[[1.0, 0, 0], [1.0, 0, 0], [0, 0, 1.0]]])
    assert float(coverage_loss(w2, keep)) == 0.0


def test_the_model_loss_adds_the_weighted_coverage_of_a_repeated_copy(copy_dir, sentences):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(copy_dir)
    plain = load_seq2seq(copy_dir).eval()
    covered = load_seq2seq(copy_dir, coverage_loss=2.0).eval()
    source = [sentences[5]]
    once, twice = format_target([sentences[5]]), format_target([sentences[5], sentences[5]])
    with torch.no_grad():
        outs = {}
        for name, target in (("once", once), ("twice", twice)):
            enc, lab = _batch(tok, source, [target])
            args = dict(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=lab)
            outs[name] = (plain(**args), covered(**args))
    p, c = outs["twice"]
    assert p.coverage is None and float(p.loss) == pytest.approx(float(c.nll), rel=1e-5)
    assert float(c.loss) == pytest.approx(float(c.nll) + 2.0 * float(c.coverage), rel=1e-5)
    # copying the sentence a second time re-attends the positions the first copy covered
    assert float(c.coverage) > 3 * float(outs["once"][1].coverage)


def test_config_overrides_take_existing_attributes_only(copy_dir):
    from densex.propositionizer.backbone import checked_config_overrides

    assert checked_config_overrides(copy_dir, {"coverage_loss": 1.0}) == {"coverage_loss": 1.0}
    assert checked_config_overrides(copy_dir, None) == {}
    with pytest.raises(ValueError, match=r"model\.config_overrides: \['coverage_lost'\]"):
        checked_config_overrides(copy_dir, {"coverage_lost": 1.0})


def test_novel_label_tokens_weigh_more_in_the_loss(copy_dir):
    """`novel_token_weight`: a label token found only in the read-only context (or nowhere in
    the source) is novel; one in the sentence itself, the separator and `[SEP]` are not. The
    weighted mean moves the loss toward the novel tokens' NLL, and weight 1 is the plain mean."""
    from transformers import AutoTokenizer

    from densex.propositionizer.copy_lm import label_weights
    from densex.propositionizer.pairs import format_source

    tok = AutoTokenizer.from_pretrained(copy_dir)
    source = format_source("Genghis Khan", "", "He was born in 1162.", context="Temujin ruled.")
    target = format_target(["Temujin was born in 1162.", "Temujin ruled."])
    enc, lab = _batch(tok, [source], [target])
    plain = load_seq2seq(copy_dir).eval()
    weighted = load_seq2seq(copy_dir, novel_token_weight=3.0).eval()
    w = label_weights(enc.input_ids, lab, weighted.config)
    assert label_weights(enc.input_ids, lab, plain.config) is None
    words = tok.convert_ids_to_tokens(lab[lab != -100].tolist())
    heavy = {t for t, x in zip(words, w.tolist()) if x == 3.0}
    # "temujin" and "ruled" are in the context only; "was born in 1162 ." are in the sentence
    assert heavy == {"te", "##mu", "##jin", "ruled"}
    args = dict(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=lab)
    with torch.no_grad():
        a, b = plain(**args), weighted(**args)
    assert float(a.loss) != pytest.approx(float(b.loss), rel=1e-3)


def test_end_penalty_lowers_the_end_by_the_share_of_the_sentence_unsaid(copy_dir):
    """`end_penalty` ε: the end token's log-probability falls by ε x the share of the sentence's
    content pieces (`copy_decode.end_words`: not its stop words, title or context) that the
    row has not written, counting only each row's own tokens (`lengths`); nothing else moves.
    The generator reads the pieces off the tokenizer (`content_pieces.content_vocab`)."""
    from transformers import AutoTokenizer

    from densex.propositionizer.content_pieces import content_vocab
    from densex.propositionizer.copy_decode import apply_rules, end_words, sentence_mask
    from densex.propositionizer.pairs import format_source

    tok = AutoTokenizer.from_pretrained(copy_dir)
    model = load_seq2seq(copy_dir)
    vocab = content_vocab(tok)
    source = format_source(
        "Genghis Khan", "", "He was born as Temujin in 1162.", context="Khan founded an empire."
    )
    enc = tok([source], return_tensors="pt")
    words = end_words(enc.input_ids, sentence_mask(model, enc.input_ids), vocab)
    expected = set(tok.convert_tokens_to_ids(tok.tokenize("born temujin 1162")))
    assert set(words[0].tolist()) - {-1} == expected
    said = tok("temujin was born", add_special_tokens=False).input_ids
    more = tok(" in 1162", add_special_tokens=False).input_ids
    cfg = model.config
    fed = torch.tensor([[cfg.decoder_start_token_id, *said, *more]] * 2)
    lengths = torch.tensor([fed.shape[1], 1 + len(said)])  # the second row: its first part
    src = {"end_words": words.expand(2, -1), "end_penalty": 3.0}
    logp = apply_rules(model, src, torch.zeros(2, cfg.vocab_size), fed, lengths)
    unsaid = len(expected - set(said)) / len(expected)
    assert 0 < unsaid < 1
    assert logp[:, cfg.eos_token_id].tolist() == pytest.approx([0.0, -3.0 * unsaid])
    logp[:, [cfg.eos_token_id, cfg.pad_token_id, cfg.decoder_start_token_id]] = 0.0
    assert not logp.any()
    gen = PropositionGenerator(copy_dir, end_penalty=2.0)
    gen.setup()
    assert torch.equal(gen.generate_kwargs["content_vocab"], vocab)
    assert vocab[tok.convert_tokens_to_ids("born")] and not vocab[tok.convert_tokens_to_ids("the")]


@pytest.mark.parametrize("num_beams", [1, 2])
def test_context_penalty_keeps_copies_to_the_sentence(copy_dir, num_beams):
    """`context_penalty` γ lowers the copy score of every title and context position: the
    untrained copy head, which copies its source from the start (title, then context), copies
    none of them under a large γ, while the sentence's own pieces stay open to it."""
    from transformers import AutoTokenizer

    from densex.propositionizer.pairs import format_source

    tok = AutoTokenizer.from_pretrained(copy_dir)
    model = load_seq2seq(copy_dir)
    source = format_source(
        "Genghis Khan", "", "He was born as Temujin in 1162.", context="Khan founded an empire."
    )
    enc = tok([source], return_tensors="pt")
    outside = set(tok.convert_tokens_to_ids(tok.tokenize("title genghis khan context founded")))
    with torch.no_grad():
        plain = model.generate(**enc, max_new_tokens=12)
        held = model.generate(**enc, max_new_tokens=12, num_beams=num_beams, context_penalty=100.0)
    assert outside & set(plain[0].tolist())
    assert not outside & set(held[0].tolist())
    if num_beams == 2:  # the sentence itself is still copied
        assert tok.convert_tokens_to_ids("born") in held[0].tolist()


@pytest.mark.parametrize("num_beams", [1, 2])
def test_end_penalty_ends_a_row_at_its_budget(copy_dir, num_beams):
    """With the end penalty, a row that has written `END_RATIO` x its sentence's word pieces
    (+ `END_SLACK`) ends: the untrained copy head, which copies its whole source (title,
    context, then the sentence), is cut at that budget; without the rule it runs past it."""
    from transformers import AutoTokenizer

    from densex.propositionizer.copy_decode import END_RATIO, END_SLACK
    from densex.propositionizer.pairs import format_source

    tok = AutoTokenizer.from_pretrained(copy_dir)
    model = load_seq2seq(copy_dir)
    context = "Khan founded an empire that stretched from the Pacific to the Caspian Sea. " * 2
    enc = tok([format_source("Genghis Khan", "", "He won.", context=context)], return_tensors="pt")
    budget = END_RATIO * len(tok.tokenize("He won.")) + END_SLACK
    eos = model.config.eos_token_id
    with torch.no_grad():
        plain = model.generate(**enc, max_new_tokens=80, num_beams=num_beams)
        held = model.generate(**enc, max_new_tokens=80, num_beams=num_beams, end_penalty=1e-3)
    assert (plain[0] != model.config.pad_token_id).sum() - 1 > budget + 1
    out = held[0][held[0] != model.config.pad_token_id].tolist()
    assert out[-1] == eos and len(out) - 1 <= budget + 1

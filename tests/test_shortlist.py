"""The copy student's vocabulary shortlist (`propositionizer.shortlist`): what it holds, that
decoding with it writes only shortlisted or source tokens, that a shortlist of the whole
vocabulary changes nothing (the restricted projection is placed back exactly), and that it
is keyed by the file's content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from densex.propositionizer.backbone import load_seq2seq
from densex.propositionizer.output import passage_source
from densex.propositionizer.pairs import format_source
from densex.propositionizer.sentence_inputs import sentence_units
from densex.propositionizer.shortlist import build_shortlist, load_shortlist, save_shortlist
from helpers.config import compose_config

RULES = {"coverage_penalty": 1.0, "no_repeat_proposition": True}


@pytest.fixture(scope="module")
def student(copy_lm_dir: str):
    from transformers import AutoTokenizer

    path = copy_lm_dir  # cached_copy_lm(..., encoder=minilm_path): the session's
    return path, load_seq2seq(path).eval(), AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def batch(student, squad_open: Path):
    """Six per-sentence inputs of the first squad-open passages (no context)."""
    import re

    lines = (squad_open / "passages.jsonl").open(encoding="utf-8")
    passages = [json.loads(line) for _, line in zip(range(2), lines)]
    split = lambda texts: (re.split(r"(?<=[.!?])\s+", t.strip()) for t in texts)  # noqa: E731
    units, _ = sentence_units(passages, split, 0)
    return student[2]([passage_source(u) for u in units][:6], return_tensors="pt", padding=True)


def test_the_shortlist_holds_the_target_tokens_its_source_lacks(student):
    tok = student[2]
    pairs = [
        (format_source("Genghis Khan", "", "He was born in 1162."), "Temujin was born in 1162."),
        (format_source("Rhine", "", "It flows north."), "The Rhine flows north."),
    ]
    got = build_shortlist(tok, pairs)
    words = set(tok.convert_ids_to_tokens(got["ids"]))
    assert words == {"te", "##mu", "##jin", "the"}  # "rhine" is in its source (the title)
    assert got["pairs"] == 2 and got["vocab_size"] == len(tok)


def test_decoding_with_a_shortlist_writes_only_it_and_the_sources(student, batch):
    """A head pushed to write "zebra" (in no source) writes it without a shortlist and never
    with one that lacks it."""
    path, _, tok = student
    model = load_seq2seq(path).eval()
    zebra = tok.convert_tokens_to_ids("zebra")
    with torch.no_grad():
        model.vocab_bias[zebra] += 30.0
        model.gate.bias += 5.0  # the vocabulary path over the copy path
    short = torch.tensor(tok.convert_tokens_to_ids(["the", "was", "is"]))
    allowed = set(batch.input_ids[batch.attention_mask.bool()].tolist()) | set(short.tolist())
    cfg = model.config
    allowed |= {cfg.prop_token_id, cfg.eos_token_id, cfg.pad_token_id, cfg.decoder_start_token_id}
    assert zebra not in allowed
    with torch.no_grad():
        full = model.generate(**batch, max_new_tokens=12, **RULES)
        assert zebra in full.flatten().tolist()
        for beams in (1, 2):
            cut = model.generate(
                **batch, max_new_tokens=12, num_beams=beams, shortlist=short, **RULES
            )
            assert set(cut.flatten().tolist()) <= allowed, beams


def test_a_shortlist_of_the_whole_vocabulary_changes_nothing(student, batch):
    _, model, _ = student
    every = torch.arange(model.config.vocab_size)
    with torch.no_grad():
        for beams in (1, 2):
            full = model.generate(**batch, max_new_tokens=30, num_beams=beams, **RULES)
            same = model.generate(
                **batch, max_new_tokens=30, num_beams=beams, shortlist=every, **RULES
            )
            assert torch.equal(full, same), beams


def test_a_shortlist_file_is_checked_against_the_model(student, tmp_path):
    path, model, tok = student
    good = save_shortlist({"ids": [5, 7], "vocab_size": len(tok), "pairs": 1}, tmp_path / "s.json")
    assert load_shortlist(good, model.config.vocab_size).tolist() == [5, 7]
    other = save_shortlist({"ids": [5], "vocab_size": 32000, "pairs": 1}, tmp_path / "t.json")
    with pytest.raises(ValueError, match=r"t\.json: field vocab_size 32000"):
        load_shortlist(other, model.config.vocab_size)
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"bad\.json: not a shortlist file"):
        load_shortlist(tmp_path / "bad.json", model.config.vocab_size)


def test_generation_reads_the_shortlist_and_the_key_follows_its_content(student, tmp_path):
    from densex.pipelines.index.units import propositions_key
    from densex.propositionizer.generator import PropositionGenerator

    path, _, tok = student
    file = save_shortlist({"ids": [1996], "vocab_size": len(tok), "pairs": 1}, tmp_path / "s.json")
    gen = PropositionGenerator(path, batch_size=2, max_new_tokens=4, shortlist=str(file))
    gen.setup()
    assert gen.generate_kwargs["shortlist"].tolist() == [1996]
    passages = tmp_path / "passages.jsonl"
    passages.write_text('{"id": "a", "title": "Rhine", "text": "It flows north."}\n')
    base = ["propositionizer=model", f"propositionizer.model={path}", "trainer=cpu"]
    plain = propositions_key(compose_config("index", *base), passages)
    cfg = compose_config("index", *base, f"propositionizer.shortlist={file}")
    first = propositions_key(cfg, passages)
    save_shortlist({"ids": [1996, 2003], "vocab_size": len(tok), "pairs": 1}, file)
    assert len({plain, first, propositions_key(cfg, passages)}) == 3

"""The copy student generates in bfloat16 with the decoding rules on (`propositionizer.dtype=
bfloat16`): the coverage penalty's fp32 coverage once met bf16 copy scores and decoding failed
(`copy_lm.covered_softmax` now casts the penalty to the scores' dtype). Greedy and beam search,
with the coverage penalty and `no_repeat_proposition`, on real squad-open passages per sentence
(the passage's earlier sentences as context, as the pipeline builds them), in three ways: the
weights cast to bf16, the pipeline's own way (`PropositionGenerator` with dtype bfloat16: the
weights loaded in bf16, the trainer at precision 32-true, so no autocast), and bf16 autocast
over the fp32 weights. Each writes valid outputs that agree with fp32's (`MIN_ROWS_SAME`).

This CPU multiplies bf16 without native support (emulated: here 2-3x slower than fp32): few rows,
`MAX_NEW_TOKENS` short."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import torch

from densex.propositionizer.backbone import load_seq2seq
from densex.propositionizer.generator import PropositionGenerator
from densex.propositionizer.output import passage_source
from densex.propositionizer.sentence_inputs import sentence_units

RULES = {"coverage_penalty": 2.0, "no_repeat_proposition": True}
MAX_NEW_TOKENS = 30
# bf16 vs fp32 on these 8 inputs: every row's token ids identical (8/8 rows, greedy and beam,
# each of the three ways; 15/15 rows on the three passages' 15 sentences, also at 60 tokens;
# the smallest fp32 top-1/top-2 log-prob gap met was 0.034). Thresholds leave room for another
# CPU's kernels flipping a near-tie: at least 6 of the 8 rows identical, and position by
# position at least 90% of the tokens the same.
MIN_ROWS_SAME = 0.75
MIN_TOKENS_SAME = 0.9


@pytest.fixture(scope="module")
def student_dir(copy_lm_dir: str) -> str:
    """The untrained copy student built from the packaged MiniLM (as test_decode_speed.py):
    the session's `copy_lm_dir` (conftest), built once per run."""
    return copy_lm_dir


@pytest.fixture(scope="module")
def sources(squad_open: Path) -> list[str]:
    """Eight per-sentence inputs of the first squad-open passages (as test_decode_speed.py's
    `batch`)."""
    lines = (squad_open / "passages.jsonl").open(encoding="utf-8")
    passages = [json.loads(line) for _, line in zip(range(3), lines)]
    split = lambda texts: (re.split(r"(?<=[.!?])\s+", t.strip()) for t in texts)  # noqa: E731
    units, _ = sentence_units(passages, split, -1)
    return [passage_source(u) for u in units][:8]


@pytest.fixture(scope="module")
def fp32(student_dir: str):
    return load_seq2seq(student_dir).eval()


@pytest.fixture(scope="module")
def batch(student_dir: str, sources: list[str]):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(student_dir)(sources, return_tensors="pt", padding=True)


@pytest.fixture(scope="module")
def fp32_ids(fp32, batch) -> dict[int, torch.Tensor]:
    """fp32's token ids per beam width: the reference."""
    return {beams: _generate(fp32, batch, beams) for beams in (1, 2)}


def _generate(model, enc, num_beams: int, autocast: bool = False) -> torch.Tensor:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, num_beams=num_beams, **RULES)


def _check_valid(ids: torch.Tensor, model, rows: int) -> None:
    """Shaped like a seq2seq `generate` output: (rows, 1 + at most MAX_NEW_TOKENS) token ids,
    the start token in column 0 and nowhere else, only padding after a row's end token."""
    cfg = model.config
    assert ids.dtype == torch.long and ids.shape[0] == rows
    assert 1 < ids.shape[1] <= MAX_NEW_TOKENS + 1
    assert bool((ids[:, 0] == cfg.decoder_start_token_id).all())
    assert not bool((ids[:, 1:] == cfg.decoder_start_token_id).any())
    ended = (ids == cfg.eos_token_id).long().cumsum(1) - (ids == cfg.eos_token_id).long()
    assert bool((ids[ended > 0] == cfg.pad_token_id).all())


def _agreement(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """The share of rows with identical token ids, and of positions (over the wider output,
    the narrower padded) holding the same token."""
    width = max(a.shape[1], b.shape[1])
    a, b = (torch.nn.functional.pad(x, (0, width - x.shape[1]), value=-1) for x in (a, b))
    rows = float((a == b).all(1).float().mean())
    return rows, float((a == b).float().mean())


@pytest.mark.parametrize("num_beams", [1, 2], ids=["greedy", "beam"])
def test_bf16_weights_generate_with_the_rules_like_fp32(fp32, batch, fp32_ids, num_beams):
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    ids = _generate(bf16, batch, num_beams)
    _check_valid(ids, bf16, len(batch["input_ids"]))
    rows, tokens = _agreement(ids, fp32_ids[num_beams])
    assert rows >= MIN_ROWS_SAME and tokens >= MIN_TOKENS_SAME, (rows, tokens)


@pytest.mark.parametrize("num_beams", [1, 2], ids=["greedy", "beam"])
def test_bf16_autocast_over_fp32_weights_generates_like_fp32(fp32, batch, fp32_ids, num_beams):
    ids = _generate(fp32, batch, num_beams, autocast=True)
    assert {p.dtype for p in fp32.parameters()} == {torch.float32}
    _check_valid(ids, fp32, len(batch["input_ids"]))
    rows, tokens = _agreement(ids, fp32_ids[num_beams])
    assert rows >= MIN_ROWS_SAME and tokens >= MIN_TOKENS_SAME, (rows, tokens)


@pytest.mark.parametrize("num_beams", [1, 2], ids=["greedy", "beam"])
def test_the_pipeline_generator_in_bf16_writes_fp32s_propositions(student_dir, sources, num_beams):
    """`PropositionGenerator` as `model_backend` runs it (setup loads the weights in the dtype,
    on_predict_start casts to the runtime dtype): bf16 texts against fp32's."""
    settings = {"batch_size": 8, "max_new_tokens": MAX_NEW_TOKENS, "num_beams": num_beams}
    texts = {}
    for dtype in ("float32", "bfloat16"):
        gen = PropositionGenerator(student_dir, dtype=dtype, **settings, **RULES)
        gen.setup()
        gen.on_predict_start()
        assert {p.dtype for p in gen.model.parameters()} == {getattr(torch, dtype)}
        texts[dtype], cut = gen.generate(sources, "sentences")
        assert len(texts[dtype]) == len(cut) == len(sources)
        assert all(isinstance(json.loads(t), list) for t in texts[dtype])
    same = sum(a == b for a, b in zip(texts["bfloat16"], texts["float32"])) / len(sources)
    assert same >= MIN_ROWS_SAME, same

"""The CTranslate2 runtime (`propositionizer/ct2.py`) on the tiny T5 and real squad-open
passages: float32 greedy equals transformers' greedy token for token (through the pipeline's
`generate_sorted`, ended and cut rows alike), int8 stays within a stated set-F1 of it, the
conversion is cached once per (model, quantisation), and float16 is refused (Flan-T5
overflows)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

pytest.importorskip("ctranslate2")

from densex.metrics.set_f1 import set_scores  # noqa: E402
from densex.propositionizer.ct2 import CT2Seq2Seq, compute_type, converted_model  # noqa: E402
from densex.propositionizer.generator import PropositionGenerator  # noqa: E402
from densex.propositionizer.output import passage_source  # noqa: E402
from densex.utils.generation import generate_sorted  # noqa: E402

INT8_MIN_SET_F1 = 0.9  # int8 vs float32 outputs, unigram-F1 set-F1 (mean over passages)


@pytest.fixture(scope="module")
def t5_dir(tiny_t5: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny T5 with its end token's output row raised, so that some rows end early and
    others run to the limit."""
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    model = T5ForConditionalGeneration.from_pretrained(tiny_t5)
    eos = model.config.eos_token_id
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        model.lm_head.weight[eos] = 3 * torch.randn(model.lm_head.weight.shape[1], generator=g)
    out = tmp_path_factory.mktemp("t5") / "model"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_t5).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def sources(squad_open: Path) -> list[str]:
    lines = (squad_open / "passages.jsonl").open(encoding="utf-8")
    return [passage_source(json.loads(line)) for _, line in zip(range(24), lines)]


def _ct2(t5_dir: Path, cache: Path, quantization: str) -> CT2Seq2Seq:
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(t5_dir)
    path = converted_model(str(t5_dir), cache, quantization)
    return CT2Seq2Seq(path, tok, GenerationConfig.from_pretrained(t5_dir), compute=quantization)


def _ids(model, tok, sources, beams=1):
    out = []

    def keep(ids, batch):
        out.extend(ids.tolist())
        return [""] * len(batch)

    _, cut = generate_sorted(model, tok, sources, 8, 30, beams, decode=keep)
    return out, cut


def test_ctranslate2_float32_greedy_equals_transformers_token_for_token(t5_dir, sources, tmp_path):
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(t5_dir)
    hf = T5ForConditionalGeneration.from_pretrained(t5_dir).eval()
    want, want_cut = _ids(hf, tok, sources)
    got, got_cut = _ids(_ct2(t5_dir, tmp_path, "float32"), tok, sources)
    assert 0 < sum(want_cut) < len(sources)  # rows that end and rows cut at the limit
    assert got == want and got_cut == want_cut


def _unigram_f1(a: str, b: str) -> float:
    x, y = Counter(a.split()), Counter(b.split())
    common = sum((x & y).values())
    if not common:
        return float(a == b)
    p, r = common / sum(x.values()), common / sum(y.values())
    return 2 * p * r / (p + r)


def test_ctranslate2_int8_stays_within_the_stated_set_f1_of_float32(t5_dir, sources, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(t5_dir)
    texts = {}
    for q in ("float32", "int8"):
        model = _ct2(t5_dir, tmp_path, q)
        texts[q], _ = generate_sorted(model, tok, sources, 8, 30, 1)
    f1 = []
    for a, b in zip(texts["int8"], texts["float32"]):
        pa, pb = a.split(".") or [a], b.split(".") or [b]
        sim = torch.tensor([[_unigram_f1(x, y) for y in pb] for x in pa])
        f1.append(set_scores(sim)[2])
    assert sum(f1) / len(f1) >= INT8_MIN_SET_F1


def test_conversion_is_cached_verified_and_rebuilt_when_damaged(t5_dir, tmp_path):
    first = converted_model(str(t5_dir), tmp_path, "int8")
    stamp = (first / "model.bin").stat().st_mtime_ns
    assert converted_model(str(t5_dir), tmp_path, "int8") == first
    assert (first / "model.bin").stat().st_mtime_ns == stamp  # reused, not converted again
    assert converted_model(str(t5_dir), tmp_path, "float32") != first  # keyed by quantisation
    (first / "model.bin").write_bytes(b"damaged")
    again = converted_model(str(t5_dir), tmp_path, "int8")
    assert again == first and (again / "model.bin").stat().st_size > 100


def test_float16_is_refused_and_auto_is_int8_on_cpu_bf16_on_gpu():
    for bad in ("float16", "int8_float16"):
        with pytest.raises(ValueError, match="overflows in float16"):
            compute_type(bad)
    assert compute_type("auto", "cpu") == "int8" and compute_type("auto", "cuda") == "bfloat16"


def test_the_generator_runs_ctranslate2_through_the_pipeline_path(t5_dir, sources, tmp_path):
    torch_gen = PropositionGenerator(str(t5_dir), batch_size=8, max_new_tokens=30)
    ct2_gen = PropositionGenerator(
        str(t5_dir),
        max_new_tokens=30,
        runtime="ctranslate2",
        quantization="float32",
        convert_dir=tmp_path,
    )
    assert ct2_gen.generate(sources[:8]) == torch_gen.generate(sources[:8])
    with pytest.raises(ValueError, match="runtime must be one of"):
        PropositionGenerator(str(t5_dir), runtime="onnx")

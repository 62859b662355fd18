"""The reader: UnifiedQA's input format, EM scoring, and a real (tiny) seq2seq model end to end."""

from __future__ import annotations

import json

import pytest

from densex.metrics.answers import exact_match
from densex.pipelines.edge import build_reader
from densex.qa.cell import answer_em, qa_metrics, regex_exact_match
from densex.qa.reader import Reader, unifiedqa_input
from densex.utils.models import resolve_dtype
from helpers.config import compose_config


def test_unifiedqa_input_is_their_exact_text_format():
    q = "Who proclaimed the oil embargo?"
    c = "The 1973 oil crisis began in October 1973 when\nOAPEC proclaimed an 'oil embargo'."
    # lower-cased, literal backslash-n separator with a space each side, newline -> space,
    # outer quotes stripped (UnifiedQA tasks.py: lower + regex "'(.*)'" -> "\1")
    assert unifiedqa_input(q, c) == (
        "who proclaimed the oil embargo? \\n the 1973 oil crisis began in october 1973 when "
        "oapec proclaimed an oil embargo."
    )
    assert "\n" not in unifiedqa_input(q, c)


def test_template_input_for_other_seq2seq_readers():
    reader = FixedReader({})
    reader.input_format = "question: {question} context: {context}"
    assert reader.format_input("Who?", "Ann.") == "question: Who? context: Ann."  # case kept
    reader.input_format = "unifiedqa"
    assert reader.format_input("Who?", "Ann.") == "who? \\n ann."


def test_exact_match_known_cases():
    assert exact_match("The Beatles", ["Beatles"])  # article dropped
    assert exact_match("  october, 1973. ", ["October 1973"])  # case, punctuation, spaces
    assert exact_match("OAPEC", ["the Arab states", "OAPEC"])  # any gold answer
    assert not exact_match("October", ["October 1973"])  # partial is not exact
    assert not exact_match("", ["1973"])


class FixedReader(Reader):
    """A Reader whose model is a lookup table: tests EM@l bookkeeping without a network."""

    def __init__(self, table: dict[str, str]):  # noqa: D107 - no model to load
        self.table, self.name, self.model_path, self.input_format = table, "fixed", "-", "unifiedqa"
        self.seen: list[tuple[str, str]] = []

    def answer(self, questions, contexts):
        self.seen += list(zip(questions, contexts))
        return [self.table.get(q, "") for q in questions]


def test_qa_metrics_em_on_known_answers(tmp_path):
    questions = [
        {"id": "a", "question": "q1", "answers": ["Paris"]},
        {"id": "b", "question": "q2", "answers": ["the Seine", "Seine river"]},
        {"id": "c", "question": "q3", "answers": ["1973"]},
        {"id": "d", "question": "q4", "answers": ["Lyon"]},
    ]
    ranked = [["Paris is big"], ["a b c", "d e Seine"], ["x " * 150], ["Lyon"]]
    reader = FixedReader({"q1": "paris", "q2": "Seine", "q3": "1974", "q4": "Lyon."})
    m = qa_metrics(questions, ranked, reader, budget=5, max_words=10, out_dir=tmp_path)
    assert m["em@5"] == 75.0
    # the reader saw exactly the first 5 words of each ranking
    assert reader.seen[1] == ("q2", "a b c d e") and reader.seen[2][1] == "x x x x x"
    preds = [json.loads(line) for line in (tmp_path / "reader_predictions.jsonl").open()]
    assert [p["em"] for p in preds] == [True, True, False, True]
    assert [p["answer_in_context"] for p in preds] == [True, False, False, True]
    assert json.loads((tmp_path / "qa_manifest.json").read_text())["metrics"]["em@5"] == 75.0


def test_regex_answers_em_like_drqa():
    assert regex_exact_match("1961", [r"19\d\d"])
    assert regex_exact_match("Honolulu, Hawaii", [r"nope", r"Honolulu"])  # at the start
    assert regex_exact_match("PARIS", ["paris"])  # IGNORECASE
    assert regex_exact_match("Beyonc\u00e9", ["Beyonc(e|\u00e9)"])  # NFC text, NFD pattern
    assert not regex_exact_match("in 1961", [r"19\d\d"])  # match, not search
    assert not regex_exact_match("1961", [r"19\d\d(", "x"])  # broken patterns never match
    assert answer_em("The Seine", ["Seine"]) and not answer_em("19dd", [r"19\d\d"], "regex")
    with pytest.raises(ValueError, match="match_type"):
        answer_em("x", ["x"], "fuzzy")


def test_qa_metrics_em_with_regex_answers(tmp_path):
    """CuratedTREC-style patterns: EM is the regex match, not string equality to the pattern."""
    questions = [
        {"id": "a", "question": "q1", "answers": [r"19\d\d"]},
        {"id": "b", "question": "q2", "answers": [r"(the )?Seine( river)?"]},
        {"id": "c", "question": "q3", "answers": [r"Lyon"]},
    ]
    ranked = [["born 1961"], ["the Seine"], ["Paris"]]
    reader = FixedReader({"q1": "1961", "q2": "Seine river", "q3": "Paris"})
    m = qa_metrics(
        questions, ranked, reader, budget=5, max_words=10, out_dir=tmp_path, match_type="regex"
    )
    assert m["em@5"] == round(200 / 3, 4)
    preds = [json.loads(line) for line in (tmp_path / "reader_predictions.jsonl").open()]
    assert [p["em"] for p in preds] == [True, True, False]


def test_reader_none_and_missing_model():
    from omegaconf import OmegaConf

    assert build_reader(None) is None
    assert build_reader(OmegaConf.create({"name": "none"})) is None
    with pytest.raises(ValueError, match="reader.model"):
        build_reader({"name": "local", "model": "???"})


def _compose(overrides):
    return compose_config(None, *overrides)


def test_reader_configs_compose():
    for name in ("none", "unifiedqa", "local", "tiny"):
        cfg = _compose([f"+reader={name}", "+paths=default"])
        assert cfg.reader.name == name
    cfg = _compose(["+reader=unifiedqa", "+paths=default"])
    assert cfg.reader.model == "allenai/unifiedqa-v2-t5-large-1363200"
    assert cfg.reader.input_format == "unifiedqa"


def test_reader_tiny_composes_under_evaluate(tmp_path, monkeypatch):
    monkeypatch.setenv("DENSEX_CACHE_DIR", str(tmp_path))
    cfg = compose_config("evaluate", "reader=tiny", "budget=100")
    assert cfg.reader._target_ == "densex.qa.reader.tiny_reader"
    assert cfg.reader.out_dir == f"{tmp_path}/models/tiny-t5-reader"


@pytest.fixture(scope="module")
def tiny_cfg(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = _compose(["+reader=tiny", "+paths=default", f"paths.cache_dir={cache}"])
    return cfg.reader


class EchoModel:
    """A deterministic seq2seq stand-in: "generates" the last few non-padding input tokens of
    each row, so every input gets its own answer and a mix-up between rows shows."""

    def __init__(self, tail: int = 12):
        self.tail, self.calls = tail, []

    def generate(self, input_ids, attention_mask, max_new_tokens, do_sample, num_beams):
        import torch

        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            real = [t for t, m in zip(ids, mask) if m][:-1]  # drop the closing </s>
            rows.append([0, *real[-self.tail :], 1])  # decoder start, tokens, </s>
        self.calls.append(attention_mask.sum(dim=1).tolist())
        width = max(len(r) for r in rows)
        return torch.tensor([r + [0] * (width - len(r)) for r in rows])


def test_reader_batching_maps_answers_to_their_questions(tiny_cfg):
    """The real Reader.answer (length sort, batches, padding, un-sorting) with a model whose
    answers differ per input: each answer must come back to its own question."""
    reader = build_reader(tiny_cfg)
    assert isinstance(reader, Reader) and reader.device.type == "cpu"
    reader.model = EchoModel()
    qs = ["who?", "when did the crisis begin?", "what is oil?", "where?"]
    cs = ["short one alpha", "a " * 40 + "the crisis began in october bravo", "oil charlie", "x"]
    reader.batch_size = 2  # length sorting + two batches
    batched = reader.answer(qs, cs)
    # the longest inputs went first, two per batch, padded to the batch's longest
    lengths = [
        len(reader.tokenizer(reader.format_input(q, c))["input_ids"]) for q, c in zip(qs, cs)
    ]
    assert reader.model.calls == [
        sorted(lengths, reverse=True)[:2],
        sorted(lengths, reverse=True)[2:],
    ]
    for answer, marker in zip(batched, ["alpha", "bravo", "charlie", "x"]):
        assert answer.endswith(marker), (answer, marker)
    assert len(set(batched)) == 4
    ids = [reader.tokenizer(reader.format_input(q, c))["input_ids"][:-1] for q, c in zip(qs, cs)]
    expected = [reader.tokenizer.decode(i[-12:], skip_special_tokens=True).strip() for i in ids]
    assert batched == expected
    one_by_one = [reader.answer([q], [c])[0] for q, c in zip(qs, cs)]
    assert batched == one_by_one


def test_tiny_reader_generates_strings_in_order(tiny_cfg):
    """The real (random) tiny T5 behind Reader.answer: each answer is the one its own input gets
    alone, whatever the input order and the length-sorted batching do."""
    import torch

    reader = build_reader(tiny_cfg)
    torch.manual_seed(0)  # the saved random T5 answers <pad> to everything: spread its weights
    with torch.no_grad():
        for p in reader.model.parameters():
            p.normal_(0, 0.5)
    qs = ["who?", "what is oil?", "when did the crisis begin?"]
    cs = ["a " * 40, "oil", "the crisis began in october 1973 when OAPEC members"]
    reader.batch_size = 2  # length sorting + two batches
    answers = reader.answer(qs, cs)
    assert len(answers) == 3 and all(isinstance(a, str) for a in answers)
    assert len(set(answers)) == 3, answers  # distinct, so a mix-up between inputs shows
    assert answers == [reader.answer([q], [c])[0] for q, c in zip(qs, cs)]
    assert reader.answer(qs[::-1], cs[::-1]) == answers[::-1]


def test_reader_dtype_follows_the_shared_rule(tiny_cfg, monkeypatch):
    import torch

    cfg = dict(tiny_cfg)
    cfg["dtype"] = "bf16"  # an alias the shared resolver knows
    assert build_reader(cfg).model.dtype == torch.bfloat16
    assert build_reader(tiny_cfg).dtype == torch.float32
    # auto: bf16 only on a GPU that supports it (the old rule said bf16 on any cuda device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("float16") == torch.float16 and resolve_dtype(torch.int8) == torch.int8
    with pytest.raises(ValueError, match="dtype must be"):
        resolve_dtype("float64x")


def test_qa_metrics_with_tiny_reader_on_squad(tiny_cfg, squad_open, tmp_path):
    from densex.utils.io import read_jsonl

    passages = [p["text"] for p in read_jsonl(squad_open / "passages.jsonl")][:10]
    questions = list(read_jsonl(squad_open / "questions.jsonl"))[:12]
    ranked = [passages[i % 10 :] + passages[: i % 10] for i in range(len(questions))]
    reader = build_reader(tiny_cfg)
    m = qa_metrics(questions, ranked, reader, budget=100, max_words=500, out_dir=tmp_path)
    assert {"em@100", "answer_recall@100", "answer_recall@500"} <= set(m)
    preds = [json.loads(line) for line in (tmp_path / "reader_predictions.jsonl").open()]
    # EM@100 is SQuAD EM of the written predictions against the gold answers, in percent
    em = [exact_match(p["prediction"], q["answers"]) for p, q in zip(preds, questions)]
    assert m["em@100"] == pytest.approx(100.0 * sum(em) / len(em), abs=1e-4)
    assert [p["em"] for p in preds] == em
    assert len(preds) == len(questions)
    assert [p["id"] for p in preds] == [q["id"] for q in questions]
    manifest = json.loads((tmp_path / "qa_manifest.json").read_text())
    assert manifest["reader"] == "tiny" and manifest["questions"] == 12

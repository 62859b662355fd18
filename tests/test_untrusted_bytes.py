"""One reader of untrusted bytes (issue 23, item 1): every input path reads bytes and decodes
them line by line (`utils.io.numbered_lines`, `read_json`), so a non-UTF-8 byte, a NUL, a
truncated gzip or a random binary file ends in one located `DataError`
(`FILE:LINE: invalid UTF-8 byte 0xNN at byte offset N`), and `on_error=skip` skips the line.

Each input is fed to the reader its stage calls (the corpus dispatch `corpus.sources`, the
propositions, document, question, qrels, BEIR and collection readers, the teacher's reply
cache); then the CLI: the line-5 passages file of the issue through `index.py stage=units`
(one stderr line, exit 2; with `corpus.on_error=skip` the other lines kept and the skip
counted in the units manifest), and random bytes as a question file and a qrels file.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from densex.corpus.beir import iter_beir_corpus
from densex.corpus.collections import iter_passage_batches, iter_unit_batches
from densex.corpus.readers import Skips, iter_proposition_rows
from densex.data.beir import load_beir_queries
from densex.data.qrels import read_qrels
from densex.data.questions import load_questions
from densex.utils.io import DataError
from helpers.env import subprocess_env
from helpers.formats import read_jsonl, run_cli
from helpers.typed import source_rows

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
PASSAGES = read_jsonl(DEMO / "passages.jsonl")[:6]
PROPS = read_jsonl(DEMO / "propositions.jsonl")[:6]
QUESTIONS = [
    {"id": f"q{i}", "question": f"Who wrote book number {i}?", "answers": [f"Author {i}"]}
    for i in range(6)
]


def _lines(rows: list[Any]) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows)


def _json(doc: Any) -> bytes:
    return json.dumps(doc, indent=1, ensure_ascii=False).encode() + b"\n"


SQUAD = {"data": [{"title": "Book_X", "paragraphs": [
    {"context": p["text"], "qas": [{"id": f"s{i}", "question": f"What is in part {i}?",
                                    "answers": [{"text": "the", "answer_start": 0}]}]}
    for i, p in enumerate(PASSAGES)]}]}  # fmt: skip

# input -> (valid file bytes, the stage's reader consuming the whole file; skips or None)
INPUTS: dict[str, tuple[bytes, Callable[[Path, Skips | None], Any]]] = {
    "corpus.passages": (
        _lines(PASSAGES),
        lambda p, s: list(source_rows({"name": "t", "passages": str(p)}, s or Skips())),
    ),
    "corpus.propositions": (_lines(PROPS), lambda p, s: list(iter_proposition_rows(p, s))),
    "corpus.documents (jsonl)": (
        _lines([{"title": p["title"], "text": p["text"]} for p in PASSAGES]),
        lambda p, s: list(
            source_rows(
                {"name": "t", "documents": str(p), "documents_format": "jsonl"}, s or Skips()
            )
        ),
    ),  # fmt: skip
    "corpus.documents (squad)": (
        _json(SQUAD),
        lambda p, s: list(
            source_rows(
                {"name": "t", "documents": str(p), "documents_format": "squad"}, s or Skips()
            )
        ),
    ),  # fmt: skip
    "questions (jsonl)": (_lines(QUESTIONS), lambda p, s: load_questions(p, "jsonl", skips=s)),
    "questions (nq-open)": (
        _lines([{"question": q["question"], "answer": q["answers"]} for q in QUESTIONS]),
        lambda p, s: load_questions(p, "nq-open", skips=s),
    ),
    "questions (dpr-tsv)": (
        b"".join(f"{q['question']}\t{q['answers']!r}\n".encode() for q in QUESTIONS),
        lambda p, s: load_questions(p, "dpr-tsv", skips=s),
    ),
    "questions (webq-brmson)": (
        _json(
            [{"qId": q["id"], "qText": q["question"], "answers": q["answers"]} for q in QUESTIONS]
        ),
        lambda p, s: load_questions(p, "webq-brmson", skips=s),
    ),  # fmt: skip
    "questions (eq)": (
        _json([{"question": q["question"], "answers": q["answers"]} for q in QUESTIONS]),
        lambda p, s: load_questions(p, "eq", skips=s),
    ),
    "questions (squad)": (_json(SQUAD), lambda p, s: load_questions(p, "squad", skips=s)),
    "qrels": (
        b"query-id\tcorpus-id\tscore\n" + b"".join(f"q{i}\td{i}\t1\n".encode() for i in range(6)),
        lambda p, s: read_qrels(p),
    ),
    "beir corpus": (
        _lines([{"_id": p["id"], "title": p["title"], "text": p["text"]} for p in PASSAGES]),
        lambda p, s: list(iter_beir_corpus(p, s)),
    ),
    "beir queries": (
        _lines([{"_id": q["id"], "text": q["question"]} for q in QUESTIONS]),
        lambda p, s: load_beir_queries(p),
    ),
    "collection passages": (
        _lines([{"id": p["id"], "contents": f"{p['title']}\n{p['text']}"} for p in PASSAGES]),
        lambda p, s: list(iter_passage_batches({"path": str(p)}, s, 4)),
    ),
    "collection units": (
        _lines([{"id": f"{p['id']}::p0", "contents": p["text"]} for p in PASSAGES]),
        lambda p, s: list(
            iter_unit_batches(
                {"path": str(p), "passage_id_pattern": r"^(?P<passage_id>.+)::p\d+$"}, s, 4
            )
        ),
    ),  # fmt: skip
}
LOCATED = r"(invalid UTF-8 byte 0x[0-9a-f]{2}|NUL byte) at byte offset \d+"


def _at_line_2(data: bytes, bad: bytes) -> tuple[bytes, int]:
    """`bad` inserted after the first byte of line 2; (bytes, its file offset)."""
    offset = data.index(b"\n") + 2
    return data[:offset] + bad + data[offset:], offset


def _read(name: str, path: Path, skips: Skips | None = None) -> Any:
    return INPUTS[name][1](path, skips)


@pytest.mark.parametrize("name", list(INPUTS))
def test_valid_file_reads(tmp_path: Path, name: str) -> None:
    path = tmp_path / "input"
    path.write_bytes(INPUTS[name][0])
    assert _read(name, path)  # the fixtures are valid: what the faults below break


@pytest.mark.parametrize("bad, what", [(b"\xe9", "invalid UTF-8 byte 0xe9"), (b"\x00", "NUL byte")])
@pytest.mark.parametrize("name", list(INPUTS))
def test_bad_byte_is_located(tmp_path: Path, name: str, bad: bytes, what: str) -> None:
    path = tmp_path / "input"
    data, offset = _at_line_2(INPUTS[name][0], bad)
    path.write_bytes(data)
    with pytest.raises(DataError) as e:
        _read(name, path)
    assert str(e.value) == f"{path}:2: {what} at byte offset {offset}" + (
        " (a binary file?)" if bad == b"\x00" else ""
    )


SKIPPABLE = [n for n in INPUTS if n not in ("qrels", "beir queries", "corpus.documents (squad)")]
SKIPPABLE = [n for n in SKIPPABLE if "webq" not in n and "(eq)" not in n and "(squad)" not in n]


@pytest.mark.parametrize("name", SKIPPABLE)
def test_on_error_skip_skips_the_bad_line(tmp_path: Path, name: str) -> None:
    """Line-based inputs: `on_error=skip` drops the bad line only, and counts it."""
    path = tmp_path / "input"
    path.write_bytes(_at_line_2(INPUTS[name][0], b"\xe9")[0])
    valid = tmp_path / "valid"
    valid.write_bytes(INPUTS[name][0])
    skips = Skips("skip")
    got, full = _read(name, path, skips), _read(name, valid)
    n = sum(len(b) for b in got) if "collection" in name else len(got)
    m = sum(len(b) for b in full) if "collection" in name else len(full)
    assert n == m - 1 and skips.total == 1
    assert re.search(r":2: invalid UTF-8 byte 0xe9 at byte offset \d+$", skips.examples[0])


@pytest.mark.parametrize("name", list(INPUTS))
def test_truncated_gzip_is_located(tmp_path: Path, name: str) -> None:
    path = tmp_path / "input.gz"
    full = gzip.compress(INPUTS[name][0] * 20, mtime=0)
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError) as e:
        _read(name, path, Skips("skip") if name in SKIPPABLE else None)  # never skipped
    assert re.fullmatch(
        re.escape(str(path)) + r"(:\d+)?: truncated or corrupt (compressed|gzip) data \(.+",
        str(e.value),
    ), str(e.value)


@pytest.mark.parametrize("name", list(INPUTS))
def test_random_binary_file_is_located(tmp_path: Path, name: str) -> None:
    path = tmp_path / "input"
    path.write_bytes(random.Random(name).randbytes(4096))
    with pytest.raises(DataError) as e:
        _read(name, path)
    assert re.fullmatch(re.escape(str(path)) + r":\d+: " + LOCATED + r".*", str(e.value))


@pytest.mark.parametrize(
    "fault", [b"\x00", b"\xe9", b"\x1f\x8b\x08\x00" + bytes(range(128, 200))]
)  # a NUL, a bad byte, (truncated) gzip bytes under the plain name
def test_teacher_cache_entry_with_bad_bytes_is_reasked(tmp_path: Path, monkeypatch, caplog,
                                                      fault: bytes) -> None:  # fmt: skip
    """A corrupt reply in the teacher's cache is located in a warning and asked again."""
    from densex.propositionizer import teacher as teacher_mod
    from densex.propositionizer.output import passage_source

    t = teacher_mod.Teacher("m", base_url="http://127.0.0.1:9/v1", cache_dir=tmp_path)
    passage = {"id": "p", "title": "T", "section": "", "text": "A fact."}
    path = tmp_path / (key := t.cache_key(passage_source(passage)))[:2] / f"{key}.json"
    path.parent.mkdir(parents=True)
    good = {"content": '["A fact."]', "finish_reason": "stop", "usage": {}}
    path.write_bytes(_at_line_2(_json(good), fault)[0])
    asked = []
    fresh = teacher_mod.TeacherReply('["A fact."]', 1, 1, "stop")
    monkeypatch.setattr(t, "_complete", lambda prompt: asked.append(prompt) or fresh)
    assert t.reply(passage).cached is False and len(asked) == 1
    assert re.search(re.escape(str(path)) + r":\d+: " + LOCATED, caplog.text), caplog.text
    assert t.reply(passage).cached is True  # the entry was rewritten whole


# -- through the CLI ---------------------------------------------------------------------------


def _line5_file(tmp_path: Path) -> tuple[Path, int]:
    lines = (DEMO / "passages.jsonl").read_bytes().splitlines(keepends=True)
    at = lines[4].index(b"the ") + 2
    lines[4] = lines[4][:at] + b"\xe9" + lines[4][at + 1 :]  # "the" -> "th\xe9"
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"".join(lines))
    return path, sum(len(x) for x in lines[:4]) + at


def test_line5_non_utf8_passages_one_line_exit_2(tmp_path: Path) -> None:
    path, offset = _line5_file(tmp_path)
    cmd = [sys.executable, "index.py", "corpus=demo", "stage=units", f"corpus.passages={path}",
           f"paths.cache_dir={tmp_path / 'c'}", f"hydra.run.dir={tmp_path / 'r'}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error (bad input): {path}:5: invalid UTF-8 byte 0xe9 at byte offset {offset}"
    ]


def test_line5_with_on_error_skip_keeps_the_other_lines(tmp_path: Path) -> None:
    path, offset = _line5_file(tmp_path)
    cache = tmp_path / "c"
    rc = run_cli(["python", "index.py", "corpus=demo", "stage=units", f"corpus.passages={path}",
                  "corpus.on_error=skip", f"paths.cache_dir={cache}",
                  f"hydra.run.dir={tmp_path / 'r'}"])  # fmt: skip
    assert rc == 0
    (manifest,) = cache.glob("units/demo/*/manifest.json")
    m = json.loads(manifest.read_text(encoding="utf-8"))
    assert m["units"]["passage"]["count"] == 50  # 51 lines, line 5 skipped
    assert f"{path}:5: invalid UTF-8 byte 0xe9 at byte offset {offset}" in m["skipped"]["examples"]
    assert m["skipped"]["by_field"]["record"] == 1


def test_line5_through_evaluate_one_line_exit_2(tmp_path: Path, capfd) -> None:
    """evaluate.py reads the passages for its size estimate too (retrieval files with text):
    still the one located line."""
    path, offset = _line5_file(tmp_path)
    capfd.readouterr()
    rc = run_cli(["python", "evaluate.py", "corpus=demo", "dataset=demo", "retriever=bm25",
                  f"corpus.passages={path}", "retrieval_text=true", f"paths.cache_dir={tmp_path / 'c'}",
                  f"hydra.run.dir={tmp_path / 'r'}"])  # fmt: skip
    assert rc == 2
    assert capfd.readouterr().err.splitlines() == [
        f"error (bad input): {path}:5: invalid UTF-8 byte 0xe9 at byte offset {offset}"
    ]


@pytest.mark.parametrize("target", ["corpus.passages", "dataset.path", "qrels"])
def test_random_bytes_through_the_cli(tmp_path: Path, capfd, target: str) -> None:
    """Random bytes as a passages, questions or qrels file: preflight's one located line."""
    junk = tmp_path / "junk.bin"
    junk.write_bytes(random.Random(target).randbytes(2048))
    args = ["python", "evaluate.py", "corpus=demo", "dataset=demo", "retriever=bm25",
            f"paths.cache_dir={tmp_path / 'c'}", f"hydra.run.dir={tmp_path / 'r'}"]  # fmt: skip
    if target == "qrels":
        args += [f"dataset.qrels.path={junk}"]
    else:
        args += [f"{target}={junk}"]
    capfd.readouterr()
    assert run_cli(args) == 2
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(r"error \(preflight\): " + re.escape(str(junk)) + r":\d+: " + LOCATED
                        + r".* \(\S+\)", err[0]), err[0]  # fmt: skip

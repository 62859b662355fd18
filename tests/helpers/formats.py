"""Tiny inputs in every documented format, written by the tests (from the shared squad-open
data where a real corpus is needed), and the documented commands for them.

`readme_command(fmt)` returns the command line the documentation (`docs/formats.md`, "Every
input format") gives for input `fmt` (the line after a `# input: fmt` comment): the formats
matrix runs exactly those, with the page's placeholders (`DIR`, `FILE`, `DATA`) replaced by the
paths of the data written here.
"""

from __future__ import annotations

import gzip
import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers.inproc import run_script

REPO = Path(__file__).resolve().parents[2]
FORMATS_PAGE = REPO / "docs" / "formats.md"


def readme_command(fmt: str) -> list[str]:
    """The documented command for input `fmt` (docs/formats.md), split into words (a missing
    one is an error)."""
    lines = FORMATS_PAGE.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.strip() == f"# input: {fmt}":
            cmd = lines[i + 1].strip()
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1] + " " + lines[i + 1].strip()
            return shlex.split(cmd)
    raise AssertionError(
        f"docs/formats.md documents no command for input {fmt!r} ('# input: {fmt}')"
    )


def run_cli(words: list[str], *extra: str) -> int:
    """Run `python SCRIPT ARGS...` (a documented command) in this process, as the shell would run
    it (`helpers.inproc.run_script`: argv, Hydra, preflight, the stage); its exit status."""
    assert words[0] == "python", words
    return run_script(words[1], *words[2:], *extra)


def fill(words: Sequence[str], **values: str) -> list[str]:
    """`words` with each placeholder (a whole path component such as `DIR`, `FILE`) replaced."""
    out = []
    for w in words:
        for name, value in values.items():
            w = w.replace(name, value)
        out.append(w)
    return out


def jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def squad_subset(squad_open: Path, n_articles: int) -> dict[str, Any]:
    """The first `n_articles` articles of squad-open: their SQuAD JSON, passages, propositions
    and questions (ids as shipped)."""
    squad = json.loads((squad_open / "squad-dev-v1.1.json").read_text(encoding="utf-8"))
    articles = squad["data"][:n_articles]
    titles = {a["title"] for a in articles}
    passages = [
        p for p in read_jsonl(squad_open / "passages.jsonl") if p["id"].split("#")[0] in titles
    ]
    pids = {p["id"] for p in passages}
    props = [r for r in read_jsonl(squad_open / "propositions.jsonl") if r["id"] in pids]
    qids = {qa["id"] for a in articles for p in a["paragraphs"] for qa in p["qas"]}
    questions = [q for q in read_jsonl(squad_open / "questions.jsonl") if q["id"] in qids]
    return {
        "squad": {"version": squad.get("version", "1.1"), "data": articles},
        "passages": passages,
        "propositions": props,
        "questions": questions,
    }


def write_beir(root: Path, subset: dict[str, Any]) -> Path:
    """A BEIR dataset folder from a squad-open subset: `corpus.jsonl` (`_id`, `title`, `text`),
    `queries.jsonl` (`_id`, `text`), `qrels/test.tsv` (with its header): the gold passage of
    each question is the chunk holding its first annotated answer span."""
    from densex.data.qrels import squad_qrels

    root.mkdir(parents=True, exist_ok=True)
    (root / "squad.json").write_text(json.dumps(subset["squad"]), encoding="utf-8")
    qrels = squad_qrels(root / "squad.json", subset["passages"]).qrels
    (root / "squad.json").unlink()
    jsonl(root / "corpus.jsonl", [
        {"_id": p["id"], "title": p["title"], "text": p["text"]} for p in subset["passages"]
    ])  # fmt: skip
    jsonl(root / "queries.jsonl", [
        {"_id": q["id"], "text": q["question"]} for q in subset["questions"]
    ])  # fmt: skip
    (root / "qrels").mkdir(exist_ok=True)
    with open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, gold in qrels.items():
            for pid, rel in gold.items():
                f.write(f"{qid}\t{pid}\t{int(rel)}\n")
    return root

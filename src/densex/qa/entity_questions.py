"""EntityQuestions (Sciavolino et al. 2021): its relation templates and the entity each
question names.

Each EntityQuestions question is a relation template filled with an entity's surface form,
so the form is recovered exactly by matching the template (`extract_entity`);
`load_eq_questions` gives the project's EQ rows (ids as `dataset=eq` gives them) plus that
`entity`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from densex.data.questions import load_questions

# The 24 EntityQuestions relation templates (Sciavolino et al. 2021), [X] = subject entity.
TEMPLATES: dict[str, str] = {
    "P17": "Which country is [X] located in?",
    "P19": "Where was [X] born?",
    "P20": "Where did [X] die?",
    "P26": "Who is [X] married to?",
    "P36": "What is the capital of [X]?",
    "P40": "Who is [X]'s child?",
    "P50": "Who is the author of [X]?",
    "P69": "Where was [X] educated?",
    "P106": "What kind of work does [X] do?",
    "P112": "Who founded [X]?",
    "P127": "Who owns [X]?",
    "P131": "Where is [X] located?",
    "P136": "What type of music does [X] play?",
    "P159": "Where is the headquarter of [X]?",
    "P170": "Who was [X] created by?",
    "P175": "Who performed [X]?",
    "P176": "Which company is [X] produced by?",
    "P264": "What music label is [X] represented by?",
    "P276": "Where is [X] located?",
    "P407": "Which language was [X] written in?",
    "P413": "What position does [X] play?",
    "P495": "Which country was [X] created in?",
    "P740": "Where was [X] founded?",
    "P800": "What is [X] famous for?",
}


def _compile(template: str) -> re.Pattern[str]:
    head, tail = template.split("[X]")
    return re.compile("^" + re.escape(head) + r"(?P<x>.+?)" + re.escape(tail) + "$", re.DOTALL)


_PATTERNS = {rel: _compile(t) for rel, t in TEMPLATES.items()}
# without a relation, try the templates with the most fixed text first (most specific)
_BY_SPECIFICITY = sorted(TEMPLATES, key=lambda r: -len(TEMPLATES[r].replace("[X]", "")))


def extract_entity(question: str, relation: str | None = None) -> str | None:
    """The entity surface form in a templated question, or None if no template matches."""
    q = question.strip()
    if relation is not None:
        if relation not in _PATTERNS:
            raise KeyError(f"unknown EntityQuestions relation {relation!r}")
        m = _PATTERNS[relation].match(q)
        return m.group("x").strip() if m else None
    for rel in _BY_SPECIFICITY:
        m = _PATTERNS[rel].match(q)
        if m:
            return m.group("x").strip()
    return None


def relation_of(path: str | os.PathLike) -> str:
    """`P19` from `.../P19.test.json`."""
    return Path(path).name.split(".")[0]


# The id prefix `load_dataset_questions` gives EQ rows through conf/dataset/eq.yaml (its
# `name`): retrieval.json rows written by `evaluate` carry ids `eq-P19-0`, `eq-P19-1`, ...
EQ_ID_PREFIX = "eq"


def load_eq_questions(
    eq_dir: str | os.PathLike, split: str = "test", id_prefix: str = EQ_ID_PREFIX
) -> list[dict[str, Any]]:
    """All `P*.{split}.json` questions (the project's EQ loader) plus the extracted `entity`.

    Ids are `{id_prefix}-{relation}-{index}`, as `load_dataset_questions` gives them for a
    dataset config named `id_prefix` (whatever the directory is called), so they join with the
    ids an `evaluate` run writes into retrieval.json.
    """
    rows = load_questions(eq_dir, "eq", split=split, id_prefix=id_prefix)
    for row in rows:
        rel = row["relation"]
        row["entity"] = extract_entity(row["question"], rel) if rel in TEMPLATES else None
    return rows

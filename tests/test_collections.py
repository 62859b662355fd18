"""Streaming readers of ready-made collections (densex.corpus.collections) on a local copy laid
out like the released FactoidWiki datasets (pyserini `{"id", "contents"}` rows)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.helpers.config import group_config

from densex.corpus.collection_rows import source_format
from densex.corpus.collections import iter_passage_batches, iter_unit_batches, passage_id_rule
from densex.corpus.readers import Skips
from densex.utils.io import DataError

PASSAGES = [
    ("Leaning Tower of Pisa-0", "Leaning Tower of Pisa",
     "Prior to restoration work performed between 1990 and 2001, the tower leaned at an angle"
     " of 5.5 degrees, but the tower now leans at about 3.99 degrees."),
    ("Leaning Tower of Pisa-1", "Leaning Tower of Pisa",
     "The top of the tower is displaced horizontally 3.9 meters (12 ft 10 in) from the center."),
    ("Agents of S.H.I.E.L.D. (season 5)-0", "Agents of S.H.I.E.L.D. (season 5)",
     "The fifth season premiered on December 1, 2017, and ran for 22 episodes on ABC."),
]  # fmt: skip
PROPOSITIONS = {
    "Leaning Tower of Pisa-0": [
        "Prior to restoration work performed between 1990 and 2001, Leaning Tower of Pisa"
        " leaned at an angle of 5.5 degrees.",
        "Leaning Tower of Pisa now leans at about 3.99 degrees.",
    ],
    "Leaning Tower of Pisa-1": [
        "The top of Leaning Tower of Pisa is displaced horizontally 3.9 meters from the center."
    ],
    "Agents of S.H.I.E.L.D. (season 5)-0": [
        "The fifth season of Agents of S.H.I.E.L.D. premiered on December 1, 2017.",
        "The fifth season of Agents of S.H.I.E.L.D. ran for 22 episodes on ABC.",
    ],
}
TITLES = {pid: title for pid, title, _ in PASSAGES}


def pyserini_passages() -> list[dict]:
    return [{"id": pid, "contents": f"{title}\n{text}"} for pid, title, text in PASSAGES]


def pyserini_propositions() -> list[dict]:
    return [
        {"id": f"{pid}-{i}", "contents": f"{TITLES[pid]}\n{text}"}
        for pid, props in PROPOSITIONS.items()
        for i, text in enumerate(props)
    ]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


@pytest.fixture
def factoid_wiki_copy(tmp_path: Path) -> dict[str, Path]:
    """A local copy in the released layout: passages as one JSONL file, propositions as a
    directory of JSONL shards (one gzipped), and the propositions again as a save_to_disk
    dataset."""
    import datasets

    passages = write_jsonl(tmp_path / "passage" / "passages.jsonl", pyserini_passages())
    props = pyserini_propositions()
    prop_dir = tmp_path / "proposition"
    write_jsonl(prop_dir / "data" / "part-00.jsonl", props[:3])
    write_jsonl(prop_dir / "data" / "part-01.jsonl.gz", props[3:])
    saved = tmp_path / "proposition-hf"
    datasets.Dataset.from_list(props).save_to_disk(str(saved))
    return {"passage": passages, "proposition": prop_dir, "proposition_hf": saved}


def factoid_cfg(repo_root: Path, **paths: Path) -> dict:
    """conf/corpus/factoid-wiki.yaml with `sources.<granularity>.path` overridden."""
    cfg = group_config("corpus", "factoid-wiki")
    for granularity, path in paths.items():
        cfg.sources[granularity].path = str(path)
    return OmegaConf.to_container(cfg, resolve=True)


def flatten(batches) -> list[dict]:
    out = []
    for batch in batches:
        assert isinstance(batch, list) and batch
        out.extend(batch)
    return out


def test_factoid_wiki_config_reads_a_local_copy(repo_root: Path, factoid_wiki_copy) -> None:
    cfg = factoid_cfg(
        repo_root,
        passage=factoid_wiki_copy["passage"],
        proposition=factoid_wiki_copy["proposition"],
    )
    assert cfg["expected_units"] == {
        "passage": 41_393_528,
        "sentence": 114_219_127,
        "proposition": 256_885_003,
    }
    batches = list(iter_passage_batches(cfg["sources"]["passage"], Skips(), batch_size=2))
    assert [len(b) for b in batches] == [2, 1]
    passages = flatten(batches)
    assert passages == [
        {"id": pid, "title": title, "section": "", "text": text} for pid, title, text in PASSAGES
    ]
    units = flatten(iter_unit_batches(cfg["sources"]["proposition"], Skips(), batch_size=4))
    expected = [
        {"id": f"{pid}-{i}", "passage_id": pid, "text": text}
        for pid, props in PROPOSITIONS.items()
        for i, text in enumerate(props)
    ]
    assert units == expected  # sorted shard order, gzip shard included, title line dropped
    known = {p["id"] for p in passages}
    assert {u["passage_id"] for u in units} == known


def test_save_to_disk_dataset_gives_the_same_units(repo_root: Path, factoid_wiki_copy) -> None:
    cfg = factoid_cfg(repo_root, proposition=factoid_wiki_copy["proposition_hf"])
    source = cfg["sources"]["proposition"]
    assert source_format(source) == "hf_disk"
    from_disk = flatten(iter_unit_batches(source, None, batch_size=3))
    jsonl = flatten(
        iter_unit_batches({**source, "path": str(factoid_wiki_copy["proposition"])}, None, 100)
    )
    assert from_disk == jsonl and len(jsonl) == 5


def test_title_text_rows_and_passage_id_column(tmp_path: Path) -> None:
    rows = [
        {"id": "u1", "pid": "Doc#0", "title": "Doc", "text": "First fact."},
        {"id": "u2", "pid": "Doc#0", "title": "Doc", "text": "Second fact."},
    ]
    src = {"path": str(write_jsonl(tmp_path / "units.jsonl", rows)), "passage_id_column": "pid"}
    assert flatten(iter_unit_batches(src, None, 10)) == [
        {"id": "u1", "passage_id": "Doc#0", "text": "First fact."},
        {"id": "u2", "passage_id": "Doc#0", "text": "Second fact."},
    ]
    passages = flatten(iter_passage_batches({"path": src["path"]}, None, 10))
    assert passages[0] == {"id": "u1", "title": "Doc", "section": "", "text": "First fact."}


def test_mapping_rule(repo_root: Path) -> None:
    cfg = factoid_cfg(repo_root)
    _, pattern = passage_id_rule(cfg["sources"]["proposition"])
    from densex.corpus.collections import _passage_of

    cases = {
        "Leaning Tower of Pisa-0-1": "Leaning Tower of Pisa-0",
        "Super_Bowl_50#12-0::p3": "Super_Bowl_50#12-0",
        "Super_Bowl_50#12-0::s0": "Super_Bowl_50#12-0",
        "wiki:123_7": "wiki:123",
        "12345#4": "12345",
    }
    for unit_id, pid in cases.items():
        assert _passage_of(unit_id, pattern) == pid, unit_id
    assert _passage_of("no-index-here", pattern) is None
    with pytest.raises(ValueError, match="passage_id_column"):
        passage_id_rule({"path": "x"})
    with pytest.raises(ValueError, match="no group"):
        passage_id_rule({"path": "x", "passage_id_pattern": r"^.+-\d+$"})


def test_bad_rows_are_located_or_counted(tmp_path: Path) -> None:
    path = tmp_path / "props.jsonl"
    path.write_text(
        json.dumps({"id": "A-0-0", "contents": "A\nGood."}) + "\n"
        + "{not json\n"
        + json.dumps({"contents": "A\nNo id."}) + "\n"
        + json.dumps({"id": "nomatch", "contents": "A\nNo passage."}) + "\n"
        + json.dumps({"id": "A-0-4", "contents": ""}) + "\n"
        + json.dumps({"id": "A-0-5", "title": "A"}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    src = {"path": str(path), "passage_id_pattern": r"^(?P<passage_id>.+)-\d+$"}
    with pytest.raises(DataError) as e:
        flatten(iter_unit_batches(src, Skips("raise"), 10))
    assert (e.value.path, e.value.line) == (str(path), 2)
    skips = Skips("skip")
    units = flatten(iter_unit_batches(src, skips, 10))
    assert units == [{"id": "A-0-0", "passage_id": "A-0", "text": "Good."}]
    assert skips.total == 5
    assert skips.by_field == {"record": 1, "id": 2, "contents": 1, "contents|text": 1}


def test_hf_rows_are_located_by_index(tmp_path: Path) -> None:
    import datasets

    saved = tmp_path / "ds"
    datasets.Dataset.from_list(
        [{"id": "P-0", "contents": "T\nok"}, {"id": "", "contents": "T\nno id"}]
    ).save_to_disk(str(saved))
    with pytest.raises(DataError) as e:
        flatten(iter_passage_batches({"path": str(saved)}, None, 10))
    assert e.value.field == "[1].id" and "ds[train]" in e.value.path
    assert flatten(iter_passage_batches({"path": str(saved), "limit": 1}, None, 10)) == [
        {"id": "P-0", "title": "T", "section": "", "text": "ok"}
    ]


def test_missing_path_is_a_located_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        flatten(iter_passage_batches({"path": str(tmp_path / "x"), "format": "jsonl"}, None, 1))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no .jsonl"):
        flatten(iter_passage_batches({"path": str(empty)}, None, 1))


def test_factoid_wiki_local_copy_builds_units_and_retrieves(
    repo_root: Path, factoid_wiki_copy, tmp_path: Path
) -> None:
    """corpus=factoid-wiki on a local copy: the units stage maps every proposition to its
    passage row by the config's rule, and a hash index retrieves the passage of a question."""
    from densex.corpus.units import unit_tables
    from densex.retrieval.search import retrieve_passages
    from helpers.typed import build_units, load_or_build_searcher

    cfg = factoid_cfg(
        repo_root,
        passage=factoid_wiki_copy["passage"],
        proposition=factoid_wiki_copy["proposition"],
    )
    cfg["granularities"] = ["passage", "proposition"]
    files = build_units(cfg, tmp_path / "units")
    assert files.counts == {"passage": 3, "proposition": 5}
    passages, units = unit_tables(files["proposition"])
    assert passages.take("id", units.numpy("passage_row")) == [
        pid for pid, props in PROPOSITIONS.items() for _ in props
    ]
    assert passages.slice("title", 0, 3) == [t for _, t, _ in PASSAGES]
    hash_cfg = OmegaConf.to_container(group_config("retriever", "hash"))
    searcher = load_or_build_searcher(
        files["proposition"], {**hash_cfg, "dim": 4096}, None, tmp_path / "cache",
        {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False},
    )  # fmt: skip
    (hit,) = retrieve_passages(
        searcher, ["how many episodes did the fifth season run for"], units.numpy("passage_row"), 1
    )
    assert passages.take("id", hit.passage_rows) == ["Agents of S.H.I.E.L.D. (season 5)-0"]
    again = build_units(cfg, tmp_path / "units")  # keyed by the copy's files: reused
    assert again.counts == files.counts

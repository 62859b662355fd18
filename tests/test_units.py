"""build_units on the real squad-open corpus: counts, ids, caching, Table 1, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rich.console import Console
from tests.helpers.config import group_config

from densex.corpus.readers import read_passages
from densex.corpus.spec import CorpusSpec
from densex.corpus.units import print_unit_table, unit_stats
from densex.utils.io import DataError
from helpers.config import compose_config
from helpers.typed import build_units, read_documents, units_dir_for, units_key


def _corpus_cfg(repo_root: Path, squad_open: Path, **overrides):
    """conf/corpus/squad-open.yaml resolved against conf/paths, as Hydra composes it."""
    cfg = OmegaConf.create(
        {
            "paths": OmegaConf.load(repo_root / "conf/paths/default.yaml"),
            "corpus": group_config("corpus", "squad-open"),
        }
    )
    cfg.paths.data_dir = str(squad_open.parent)
    cfg.merge_with_dotlist([f"corpus.{k}={v}" for k, v in overrides.items()])
    return cfg.corpus


def _jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def built(repo_root, squad_open, tmp_path_factory):
    cfg = _corpus_cfg(repo_root, squad_open)
    out = units_dir_for(cfg, tmp_path_factory.mktemp("cache"))
    return cfg, build_units(cfg, out)


def test_build_units_on_squad_open(built, squad_open, capsys) -> None:
    cfg, files = built
    assert files.counts == {"passage": 2203, "sentence": 7747, "proposition": 17657}
    passages = _jsonl(files.passages)
    assert passages == read_passages(squad_open / "passages.jsonl")
    ids = {p["id"] for p in passages}
    for gran, tag in (("passage", None), ("sentence", "s"), ("proposition", "p")):
        units = _jsonl(files[gran])
        assert len(units) == files.counts[gran]
        assert {u["passage_id"] for u in units} == ids  # every passage has units
        assert all(set(u) == {"id", "passage_id", "title", "text"} and u["text"] for u in units)
        assert len({u["id"] for u in units}) == len(units)
        if tag:
            assert units[0]["id"] == f"{passages[0]['id']}::{tag}0"
    by_passage: dict[str, list[str]] = {}
    for u in _jsonl(files["sentence"]):
        by_passage.setdefault(u["passage_id"], []).append(u["text"])
    squash = lambda t: "".join(t.split())  # noqa: E731
    for p in passages:  # sentences cover their passage: same characters, in order
        assert squash("".join(by_passage[p["id"]])) == squash(p["text"])

    manifest = json.loads(files.manifest.read_text())
    assert manifest["key"] == units_key(cfg)
    assert manifest["skipped"]["total"] == 0
    assert set(manifest["inputs"]) == {"passages", "propositions"}
    assert manifest["config"]["segmentation"]["max_words"] == 100

    rows = unit_stats(files)
    assert [r["granularity"] for r in rows] == ["passage", "sentence", "proposition"]
    avg = {r["granularity"]: r["avg_words"] for r in rows}
    assert avg["passage"] > avg["sentence"] > avg["proposition"] > 5
    assert avg["proposition"] == pytest.approx(13.8, abs=0.1)  # the data README's figure
    print_unit_table(rows, title="squad-open units")  # shown with -s; also checked below
    console = Console(record=True, width=100)
    print_unit_table(rows, console=console)
    text = console.export_text()
    assert "Propositions" in text and "17,657" in text and "Avg. # words" in text


def test_build_units_is_cached_and_keyed(built, repo_root, squad_open, tmp_path) -> None:
    cfg, files = built
    before = files.manifest.stat().st_mtime_ns
    again = build_units(cfg, files.out_dir)
    assert again == files and files.manifest.stat().st_mtime_ns == before  # reused, not redone
    # inputs change the directory; the same inputs give the same one
    cache = files.out_dir.parents[2]
    assert units_dir_for(cfg, cache) == files.out_dir
    no_props = _corpus_cfg(repo_root, squad_open, propositions="null")
    assert units_dir_for(no_props, cache) != files.out_dir
    segmented = _corpus_cfg(repo_root, squad_open, passages="null")
    shorter = _corpus_cfg(repo_root, squad_open, passages="null", **{"segmentation.max_words": 60})
    assert units_key(segmented) != units_key(shorter) != units_key(cfg)
    # a manifest whose key does not match is rebuilt (small corpus: fast)
    small = {
        "name": "t",
        "passages": str(_passages_file(tmp_path)),
        "segmentation": {"spacy_model": ""},
    }
    out = tmp_path / "u"
    build_units(small, out)
    assert not (out / "proposition.jsonl").exists()
    with pytest.raises(KeyError, match="propositions"):
        build_units(small, out)["proposition"]
    props = _props_file(tmp_path, GOOD)
    files2 = build_units(small, out, propositions_path=props)
    assert files2.counts["proposition"] == 3
    assert json.loads(files2.manifest.read_text())["key"] == units_key(small, props)


def test_segmenting_the_documents_reproduces_the_shared_passages(
    built, repo_root, squad_open, tmp_path
) -> None:
    _, files = built
    cfg = _corpus_cfg(repo_root, squad_open, passages="null", propositions="null")
    seg = build_units(cfg, tmp_path / "seg")
    assert seg.passages.read_bytes() == files.passages.read_bytes()
    assert seg["sentence"].read_bytes() == files["sentence"].read_bytes()
    assert "documents" in json.loads(seg.manifest.read_text())["inputs"]


def _passages_file(tmp_path: Path, n: int = 3) -> Path:
    path = tmp_path / "passages.jsonl"
    rows = [
        {"id": f"A#0-{i}", "title": "A", "section": "", "text": f"Sentence {i}. Another one {i}."}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _props_file(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "props.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GOOD = [{"id": f"A#0-{i}", "propositions": [f"Fact {i}."]} for i in range(3)]


@pytest.mark.parametrize(
    ("rows", "line", "field", "message"),
    [
        (GOOD[:2] + [{"id": "B#9-0", "propositions": ["x"]}], 3, "id", "unknown passage id"),
        (GOOD[:2], None, "id", "has no propositions"),
        (GOOD[:2] + [{"id": "A#0-2", "propositions": "one string"}], 3, "propositions", "list"),
        (GOOD[:2] + [{"id": "A#0-2", "propositions": ["ok", " "]}], 3, "propositions[1]", "empty"),
        (GOOD + [GOOD[0]], 4, "id", "duplicate"),
        (GOOD[:1] + ['{"id": "A#0-1", "propositions": [}'] + GOOD[2:], 2, None, "invalid JSON"),
    ],
)
def test_bad_propositions_are_located(tmp_path, rows, line, field, message) -> None:
    cfg = {
        "name": "t",
        "passages": str(_passages_file(tmp_path)),
        "segmentation": {"spacy_model": ""},
    }
    props = _props_file(tmp_path, rows)
    with pytest.raises(DataError, match=message) as err:
        build_units(cfg, tmp_path / "out", propositions_path=props)
    assert (err.value.path, err.value.line, err.value.field) == (str(props), line, field)
    assert not (tmp_path / "out" / "manifest.json").exists()  # nothing half-built looks done


def test_skip_mode_counts_into_the_manifest(tmp_path) -> None:
    rows = [
        GOOD[0],
        {"id": "A#0-1", "propositions": ["ok", ""]},
        {"id": "Z", "propositions": ["x"]},
    ]
    cfg = {
        "name": "t",
        "passages": str(_passages_file(tmp_path)),
        "segmentation": {"spacy_model": ""},
        "on_error": "skip",
    }
    files = build_units(cfg, tmp_path / "out", propositions_path=_props_file(tmp_path, rows))
    skipped = json.loads(files.manifest.read_text())["skipped"]
    # one empty proposition, one unknown id, one passage (A#0-2) without propositions
    assert skipped["total"] == 3
    assert skipped["by_field"] == {"propositions[]": 1, "id": 2}
    assert files.counts["proposition"] == 2


def test_bad_passages_are_located(tmp_path) -> None:
    path = tmp_path / "passages.jsonl"
    path.write_text(
        '{"id": "a", "title": "A", "text": "ok"}\n{"id": "b", "title": "B", "text": ""}\n'
    )
    with pytest.raises(DataError) as err:
        read_passages(path)
    assert (err.value.line, err.value.field) == (2, "text")
    path.write_text('{"id": "a", "text": "ok"}\n{"id": "a", "text": "again"}\n')
    with pytest.raises(DataError, match="duplicate") as err:
        read_passages(path)
    assert (err.value.line, err.value.field) == (2, "id")
    path.write_text('{"title": "A", "text": "ok"}\n')
    with pytest.raises(DataError) as err:
        build_units({"name": "t", "passages": str(path)}, tmp_path / "out")
    assert (err.value.line, err.value.field) == (1, "id")


def test_hf_and_jsonl_document_corpora(tmp_path) -> None:
    import datasets  # a core dependency: its absence is an error, not a skip

    long_sentence = " ".join(["word"] * 40) + "."
    article = "\n".join([" ".join([long_sentence] * 3), "Short second paragraph here."])
    ds = datasets.Dataset.from_dict(
        {"title": ["Alpha Beta", "Gamma"], "text": [article, "One more paragraph."]}
    )
    ds.save_to_disk(str(tmp_path / "wiki"))
    cfg = {
        "name": "wiki",
        "documents": str(tmp_path / "wiki"),
        "documents_format": "hf",
        "split": "train",
        "paragraph_separator": "\n",
        "passages": None,
        "segmentation": {"spacy_model": ""},
    }
    docs = list(read_documents(cfg))
    assert [d["id"] for d in docs] == ["Alpha_Beta#0", "Alpha_Beta#1", "Gamma#0"]
    files = build_units(cfg, tmp_path / "units")
    passages = _jsonl(files.passages)
    # 3 x 40 words: chunks of 80 and 40 (< 50: merged back) -> one passage of 120 words
    assert [p["id"] for p in passages] == ["Alpha_Beta#0-0", "Alpha_Beta#1-0", "Gamma#0-0"]
    assert len(passages[0]["text"].split()) == 120
    assert "fingerprints" in json.loads(files.manifest.read_text())["inputs"]["documents"]

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"title": "T", "text": "First."}\n{"title": "T", "text": "  "}\n')
    with pytest.raises(DataError) as err:
        list(read_documents({"name": "t", "documents": str(jsonl), "documents_format": "jsonl"}))
    assert (err.value.path, err.value.line, err.value.field) == (str(jsonl), 2, "text")
    bad_hf = datasets.Dataset.from_dict({"title": ["x"], "body": ["y"]})
    with pytest.raises(DataError, match="no such column"):
        # an in-memory dataset: no config can hold one, the spec can
        bad = CorpusSpec(name="t", documents=bad_hf, documents_format="hf", split=None)
        list(read_documents(bad))


def test_corpus_config_composes_with_command_line_overrides(repo_root, squad_open) -> None:
    cfg = compose_config(
        "index",
        "corpus=squad-open",
        "corpus.passages=null",
        "corpus.propositions=/elsewhere/props.jsonl",
        f"paths.data_dir={squad_open.parent}",
    )
    assert cfg.corpus.name == "squad-open" and cfg.corpus.passages is None
    assert cfg.corpus.propositions == "/elsewhere/props.jsonl"
    assert cfg.corpus.documents == str(squad_open / "squad-dev-v1.1.json")
    assert cfg.corpus.segmentation.max_words == 100 and cfg.corpus.on_error == "raise"
    # the units directory follows the inputs: a missing propositions file is a located error
    with pytest.raises(DataError, match="file not found"):
        units_dir_for(cfg.corpus, "/tmp/unused-cache")


def test_arrow_tables_match_the_jsonl_files_and_open_in_datasets(built) -> None:
    """The memory-mapped tables hold what the JSONL files hold, passage_row as an int column
    pointing at the unit's passage; a shard is a file `datasets` opens as it is."""
    import datasets

    from densex.corpus.units import unit_tables

    _, files = built
    for gran in ("passage", "sentence", "proposition"):
        passages, units = unit_tables(files[gran])
        rows = _jsonl(files[gran])
        assert units.slice("id", 0, len(units)) == [u["id"] for u in rows]
        assert units.slice("text", 0, len(units)) == [u["text"] for u in rows]
        prow = units.numpy("passage_row")
        assert prow.dtype.kind == "i"
        assert passages.take("id", prow) == [u["passage_id"] for u in rows]
        assert units.numpy("words").tolist() == [len(u["text"].split()) for u in rows]
    shard = sorted((files.out_dir / "arrow" / "proposition").glob("*.arrow"))[0]
    ds = datasets.Dataset.from_file(str(shard))
    assert ds.column_names[:3] == ["id", "passage_id", "passage_row"] and len(ds) > 0


def test_units_resume_by_shard_and_split_sentences_in_two_processes(
    repo_root, squad_open, tmp_path, monkeypatch
) -> None:
    """A build killed after its first shards resumes at the first missing one (the finished
    shards are not segmented again), and 2 spaCy processes give the 1-process sentences."""
    import densex.corpus.passage_shards as units_mod

    cfg = _corpus_cfg(repo_root, squad_open, shard_rows=500, propositions="null")
    reference = build_units(cfg, tmp_path / "one")
    real, calls = units_mod._write_passage_shard, []

    def crash_on_third(out, b, *args, **kwargs):
        calls.append(b)
        if b == 2 and len(calls) == 3:
            raise KeyboardInterrupt("killed")
        return real(out, b, *args, **kwargs)

    monkeypatch.setattr(units_mod, "_write_passage_shard", crash_on_third)
    two = _corpus_cfg(
        repo_root, squad_open, shard_rows=500, propositions="null", **{"segmentation.n_process": 2}
    )
    with pytest.raises(KeyboardInterrupt):
        build_units(two, tmp_path / "two")
    assert not (tmp_path / "two" / "manifest.json").exists()
    resumed = build_units(two, tmp_path / "two")
    assert calls == [0, 1, 2, 2, 3, 4]  # shards 0 and 1 were kept, not re-segmented
    for gran in ("passage", "sentence"):
        assert resumed[gran].read_bytes() == reference[gran].read_bytes()
    assert resumed.passages.read_bytes() == reference.passages.read_bytes()


def _guard_reads(monkeypatch, paths) -> list[Path]:
    """Make `open()` of any of `paths` raise (and `file_digest` too): what reads a units file."""
    import builtins

    from densex.corpus import units_digest as digest_mod

    guarded = {Path(p).resolve() for p in paths}
    real_open, tried = builtins.open, []

    def guarded_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and Path(file).resolve() in guarded:
            tried.append(Path(file))
            raise AssertionError(f"read {file}")
        return real_open(file, *args, **kwargs)

    def no_digest(path, *args, **kwargs):
        tried.append(Path(path))
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(digest_mod, "file_digest", no_digest)
    monkeypatch.setattr(digest_mod, "_memo", {})  # a fresh process: nothing remembered
    return tried


def test_embedding_keys_come_from_the_manifest_equal_to_hashing(built, monkeypatch) -> None:
    """The units manifest records each units file's SHA-256 and line count; the embeddings
    directory (key and shard size) found from it, reading no byte of the units file, is the
    one hashing and counting the file gives."""
    from densex.corpus.units_digest import units_digest
    from densex.retrieval.build import (
        count_lines,
        default_shard_size,
        embeddings_dir,
        shard_size_for,
    )
    from densex.retrieval.spec import RetrieverSpec
    from densex.utils.cache import artifact_dir, content_key, hash_file
    from densex.utils.integrity import policy

    _, files = built
    digests = json.loads(files.manifest.read_text())["digests"]
    spec = RetrieverSpec.from_cfg(group_config("retriever", "minilm"))
    expected = {}
    for g, path in files.units.items():
        sha, lines = hash_file(path), count_lines(path)
        assert digests[path.name]["sha256"] == sha and digests[path.name]["lines"] == lines
        assert lines == files.counts[g] and digests[path.name]["size"] == path.stat().st_size
        shard = shard_size_for(lines, policy())
        key = content_key(units=sha, retriever=spec.cache_fields("doc"), shard_size=shard)
        expected[g] = (sha, lines, shard, artifact_dir("C", "embeddings", spec.name, key=key))
    tried = _guard_reads(monkeypatch, files.units.values())
    for g, path in files.units.items():
        sha, lines, shard, emb_dir = expected[g]
        assert (units_digest(path).sha256, units_digest(path).lines) == (sha, lines)
        assert default_shard_size(path) == shard
        assert embeddings_dir(path, spec, "C") == emb_dir
    assert tried == []


def test_a_manifest_without_digests_is_hashed_once_and_recorded(
    built, tmp_path, monkeypatch
) -> None:
    """A units directory from before `digests` (or a changed file) falls back to reading the
    file, with the same values; the digest is then recorded, so the next process reads
    nothing; a file the manifest does not list is hashed and never recorded."""
    import shutil

    from densex.corpus import units_digest as digest_mod
    from densex.retrieval.build import count_lines
    from densex.utils.cache import hash_file

    _, files = built
    old = tmp_path / "old"
    old.mkdir()
    path = Path(shutil.copy2(files["proposition"], old / "proposition.jsonl"))  # mtime kept
    manifest = json.loads(files.manifest.read_text())
    recorded = manifest.pop("digests")["proposition.jsonl"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    reads: list[Path] = []
    real = digest_mod.file_digest

    def counting(p, *a, **k):
        reads.append(Path(p))
        return real(p, *a, **k)

    monkeypatch.setattr(digest_mod, "file_digest", counting)
    monkeypatch.setattr(digest_mod, "_memo", {})
    first = digest_mod.units_digest(path)
    assert (first.sha256, first.lines) == (recorded["sha256"], recorded["lines"])
    assert reads == [path.resolve()]
    assert json.loads((old / "manifest.json").read_text())["digests"] == {path.name: recorded}
    monkeypatch.setattr(digest_mod, "_memo", {})  # the next process
    assert digest_mod.units_digest(path) == first and len(reads) == 1
    # the same size, other bytes, a later mtime: hashed again, the new content's values
    data = path.read_bytes()
    path.write_bytes(data.replace(b"a", b"b", 1))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    changed = digest_mod.units_digest(path)
    assert changed.sha256 == hash_file(path) != first.sha256 and len(reads) == 2
    # a file the manifest does not list (a fused cell's combined file): never recorded
    combined = Path(shutil.copy2(path, old / "passage+proposition.jsonl"))
    assert digest_mod.units_digest(combined).lines == count_lines(combined)
    assert (
        "passage+proposition.jsonl"
        not in json.loads((old / "manifest.json").read_text())["digests"]
    )

"""Artifacts colleagues can read (the umask's mode, not the temp file's 0600), gzip outputs
the readers here open, progress lines when there is no terminal, quiet logging."""

from __future__ import annotations

import gzip
import json
import logging
import os
import stat

import pytest

from densex.utils.io import atomic_open, mkdtemp, read_json, write_json, write_jsonl
from densex.utils.progress import Progress, track


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(
    ("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)]
)
def test_artifacts_get_the_umask_mode(tmp_path, mask, file_mode, dir_mode):
    old = os.umask(mask)
    try:
        write_jsonl(tmp_path / "results.jsonl", [{"a": 1}])
        write_json(tmp_path / "retrieval.json.gz", [{"q": 1}])
        with atomic_open(tmp_path / "emb.npy", "wb") as f:
            f.write(b"\0")
        tmp = mkdtemp(tmp_path, prefix=".cache.")
    finally:
        os.umask(old)
    for name in ("results.jsonl", "retrieval.json.gz", "emb.npy"):
        assert _mode(tmp_path / name) == file_mode, name
    assert _mode(tmp) == dir_mode
    # no temp file left behind; the build dir is named like one (`remove_orphans` reads it)
    assert [p for p in tmp_path.glob(".*.tmp") if p.is_file()] == []
    assert tmp.name.startswith(".cache.") and tmp.name.endswith(".tmp")


def test_gzip_json_roundtrip_is_deterministic(tmp_path):
    rows = [{"id": "q1", "ctxs": [{"id": "p#1", "score": 0.5, "has_answer": True}]}]
    write_json(tmp_path / "a.json.gz", rows, indent=None)
    first = (tmp_path / "a.json.gz").read_bytes()
    assert json.loads(gzip.decompress(first)) == rows  # what `gunzip` gives pyserini
    assert read_json(tmp_path / "a.json.gz") == rows
    write_json(tmp_path / "a.json.gz", rows, indent=None)
    assert (tmp_path / "a.json.gz").read_bytes() == first  # no time or name in the header


def test_progress_logs_periodic_lines_without_a_terminal(caplog):
    caplog.set_level(logging.INFO, logger="densex.progress")
    with Progress("search", total=4, unit="queries", every_s=0, tty=False) as p:
        for _ in range(4):
            p.advance(1)
    lines = [r.getMessage() for r in caplog.records]
    assert "search: 2/4 queries (50%)" in lines[1]
    assert "queries/s" in lines[1] and "left" in lines[1]
    assert lines[-1].startswith("search: 4 queries in ")
    caplog.clear()
    assert list(track(range(3), "answers", unit="questions")) == [0, 1, 2]
    assert caplog.records[-1].getMessage().startswith("answers: 3 questions in ")


def test_quiet_logging_drops_known_noise_and_verbose_restores_it(caplog):
    from densex.utils.logging import setup_logging

    root = logging.getLogger()
    handler = logging.StreamHandler()
    root.addHandler(handler)
    try:
        setup_logging(verbose=False)
        assert logging.getLogger("faiss.loader").getEffectiveLevel() == logging.WARNING
        tip = logging.LogRecord(
            "pytorch_lightning.utilities.rank_zero",
            logging.INFO,
            "",
            0,
            "💡 Tip: For seamless cloud logging ... litlogger",
            None,
            None,
        )
        gpu = logging.LogRecord(
            "pytorch_lightning.utilities.rank_zero",
            logging.INFO,
            "",
            0,
            "GPU available: False, used: False",
            None,
            None,
        )
        assert not handler.filter(tip) and handler.filter(gpu)
        setup_logging(verbose=True)
        assert handler.filter(tip)
        assert logging.getLogger("faiss.loader").level == logging.NOTSET
    finally:
        root.removeHandler(handler)
        setup_logging(verbose=False)


def test_search_in_chunks_gives_one_call_and_logs_queries_per_second(caplog):
    import numpy as np

    from densex.retrieval.search import search_chunked

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 4)).astype(np.float32)

    class Exact:
        ntotal = 50

        def search(self, queries, n):
            q = vectors[[int(x) for x in queries]]
            scores = q @ vectors.T
            rows = np.argsort(-scores, axis=1, kind="stable")[:, :n]
            return np.take_along_axis(scores, rows, axis=1), rows

    queries = [str(i) for i in range(7)]
    caplog.set_level(logging.INFO, logger="densex.progress")
    s1, r1 = Exact().search(queries, 5)
    s2, r2 = search_chunked(Exact(), queries, 5, chunk=3)
    assert np.array_equal(r1, r2) and np.allclose(s1, s2)
    assert "7 queries in" in caplog.records[-1].getMessage()
    assert "queries/s" in caplog.records[-1].getMessage()

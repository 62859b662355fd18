"""Logging: the API is quiet unless asked and every message is printed once; an entry's
preflight error is one line (on stderr), not a second copy through the console log handler."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from densex.utils import logging as dlog
from helpers.env import subprocess_env

SNIPPET = """
import logging, sys
from densex.utils.logging import get_logger, library_logging
{before}
library_logging({verbose})
log = get_logger("densex.pipelines.search.index")
log.info("INFO-LINE")
log.warning("WARNING-LINE")
logging.getLogger("faiss.loader").info("FAISS-LINE")
"""


def _run(before: str = "", verbose: bool = False) -> str:
    code = SNIPPET.format(before=before, verbose=verbose)
    proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "before, verbose, shown",
    [
        ("", False, ["WARNING-LINE"]),  # an application that configured nothing
        ("", True, ["INFO-LINE", "WARNING-LINE"]),
        ("logging.getLogger('densex').setLevel(logging.INFO)", False, ["INFO-LINE", "WARNING-LINE"]),
        # the application's own handlers: each message once, through them
        ("logging.basicConfig(level=logging.INFO, stream=sys.stdout)", False, ["WARNING-LINE"]),
        ("logging.basicConfig(level=logging.INFO, stream=sys.stdout)", True,
         ["INFO-LINE", "WARNING-LINE", "FAISS-LINE"]),
    ],
)  # fmt: skip
def test_library_logging_is_quiet_unless_asked_and_prints_once(before, verbose, shown):
    out = _run(before, verbose)
    for line in ("INFO-LINE", "WARNING-LINE", "FAISS-LINE"):
        assert out.count(line) == (1 if line in shown else 0), (line, out)


def test_entries_log_info_again_after_an_api_call():
    """An API call in the process (quiet: densex at WARNING) does not silence an entry's own
    set-up, and a level the application chose is kept."""
    pkg = logging.getLogger("densex")
    before, marker = pkg.level, getattr(pkg, dlog._SET_BY_US, None)
    try:
        pkg.setLevel(logging.NOTSET)
        dlog.library_logging(False)
        assert pkg.level == logging.WARNING
        dlog.setup_logging(False)
        assert pkg.level == logging.NOTSET
        pkg.setLevel(logging.DEBUG)  # the application's choice
        dlog.library_logging(False)
        assert pkg.level == logging.DEBUG
    finally:  # the level and whose choice it was, as before (else a WARNING an API call set
        # would stay as if the application had chosen it, silencing later entries' INFO lines)
        pkg.setLevel(before)
        setattr(pkg, dlog._SET_BY_US, marker)
        dlog.setup_logging(False)


def test_preflight_error_goes_to_the_terminal_once(tmp_path):
    stream, file = logging.StreamHandler(), logging.FileHandler(tmp_path / "job.log")
    root = logging.getLogger()
    root.addHandler(stream)
    root.addHandler(file)
    try:
        dlog.setup_logging(False)
        record = logging.LogRecord("densex.pipelines.preflight.run", logging.ERROR, "", 0,
                                   "preflight: x", None, None)  # fmt: skip
        info = logging.LogRecord("densex.pipelines.preflight.run", logging.INFO, "", 0,
                                 "preflight ok", None, None)  # fmt: skip
        assert not stream.filter(record) and file.filter(record)  # fail() prints it itself
        assert stream.filter(info)
    finally:
        root.removeHandler(stream)
        root.removeHandler(file)
        file.close()


def test_entry_preflight_error_is_one_line_on_stderr_and_none_on_stdout(repo_root, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(repo_root / "evaluate.py"), "corpus=demo", "dataset=nq",
         f"dataset.path={tmp_path}/nq.tsv", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=repo_root, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "file not found" not in proc.stdout, proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error (preflight): dataset.path=")
    assert "file not found" in (tmp_path / "run" / "evaluate.log").read_text()  # kept in the log

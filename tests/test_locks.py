"""One build per artifact (issue 23): `utils.locks` between real processes.

Each test starts plain Python processes (no torch: about a second each) that build or claim
through the lock of one artifact: the artifact is built once and the waiter says who holds it,
a SIGKILLed holder's lock is taken over, a wait times out with the lock file and the holder
named, and shard claims split the work between processes with every shard done once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from densex.utils import locks
from densex.utils.io import DataError
from helpers import procs
from helpers.env import subprocess_env

ENV = subprocess_env(DENSEX_PROGRESS_S="1", COLUMNS="1000")  # log lines unwrapped

BUILDER = """
import json, os, sys, time
from pathlib import Path
from densex.utils.locks import build_once
from densex.utils.logging import setup_logging
setup_logging()
art, log = Path(sys.argv[1]), Path(sys.argv[2])
def reuse():
    return art.read_text() if art.exists() else None
def build():
    with open(log, "a") as f:
        f.write(f"build {os.getpid()}\\n")
    go, deadline = Path(str(log) + ".go"), time.monotonic() + float(sys.argv[3])
    while not go.exists() and time.monotonic() < deadline:  # the test says when to finish
        time.sleep(0.02)
    art.write_text(f"built by {os.getpid()}")
    return art.read_text()
print("RESULT", build_once(art, "test artifact", reuse, build), flush=True)
"""

CLAIMER = """
import os, sys, time
from pathlib import Path
from densex.utils.locks import claim_each, release, share_pending
d = Path(sys.argv[1])
items = list(range(int(sys.argv[2])))
path = lambda i: d / f"item-{i}"
done = lambda i: path(i).exists()
def run(pending):
    for i in claim_each(pending, path, done, "item"):
        time.sleep(0.15)
        path(i).write_text(str(os.getpid()))
        with open(d / "log", "a") as f:
            f.write(f"{i} {os.getpid()}\\n")
        release(path(i))
print("READY", flush=True)
while not (d / "go").exists():  # all start together
    time.sleep(0.02)
share_pending(items, done, path, run, "item")
print("DONE", flush=True)
"""


def Proc(code: str, *args: object) -> procs.Proc:  # noqa: N802 - reads as the class it makes
    """A child Python process running `code` with `args`."""
    return procs.Proc([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], ENV)


def _wait_for_file(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_two_processes_build_an_artifact_once_and_the_waiter_names_the_holder(tmp_path):
    art, log = tmp_path / "cache" / "abc123", tmp_path / "builds.log"
    first = Proc(BUILDER, art, log, 60)
    _wait_for_file(log)  # the first holds the lock and is building
    second = Proc(BUILDER, art, log, 60)
    second.until(f"waiting for test artifact {art}: locked by host")
    (tmp_path / "builds.log.go").touch()
    out1, out2 = first.finish(), second.finish()
    assert log.read_text().splitlines() == [f"build {first.pid}"]  # built once
    assert f"RESULT built by {first.pid}" in out1 and f"RESULT built by {first.pid}" in out2
    assert f"pid {first.pid} (since" in out2
    assert "built by another process; reusing it" in out2
    assert (art.parent / ".abc123.lock").exists()  # the lock lives beside the artifact


def test_a_killed_holders_lock_is_taken_over(tmp_path):
    art, log = tmp_path / "abc", tmp_path / "builds.log"
    holder = Proc(BUILDER, art, log, 120)
    _wait_for_file(log)
    waiter = Proc(BUILDER, art, log, 0)
    waiter.until(f"pid {holder.pid} (since")  # waiting, and naming the holder
    os.kill(holder.pid, signal.SIGKILL)
    holder.p.wait()
    waiter.finish()
    assert log.read_text().splitlines() == [f"build {holder.pid}", f"build {waiter.pid}"]
    assert art.read_text() == f"built by {waiter.pid}"


def test_a_lock_wait_times_out_naming_the_lock_file_and_the_holder(tmp_path):
    art, log = tmp_path / "abc", tmp_path / "builds.log"
    holder = Proc(BUILDER, art, log, 60)
    try:
        _wait_for_file(log)
        with pytest.raises(locks.LockTimeout) as e, locks.locked(art, "test art", timeout_s=1.0):
            pass
        text = str(e.value)
        assert text.startswith(f"{tmp_path / '.abc.lock'}: timed out after ")
        assert f"pid {holder.pid}" in text and "cache.lock_timeout_s" in text
        assert isinstance(e.value, DataError)  # the entry scripts print it as one line
    finally:
        holder.p.kill()
        holder.p.wait()
    assert locks.held_here() == []


def test_claims_share_the_items_between_processes_each_done_once(tmp_path):
    n = 12
    procs = [Proc(CLAIMER, tmp_path, n) for _ in range(3)]
    for p in procs:
        p.until("READY")
    (tmp_path / "go").touch()
    for p in procs:
        p.finish(120)
    rows = [line.split() for line in (tmp_path / "log").read_text().splitlines()]
    assert sorted(int(i) for i, _ in rows) == list(range(n))  # every item once
    workers = {pid for _, pid in rows}
    assert len(workers) >= 2  # the work was shared, not done by one while the others waited


def test_a_claim_held_by_this_process_is_reentrant_and_released(tmp_path):
    art = tmp_path / "x"
    with locks.locked(art, "x"):
        with locks.locked(art, "x"):  # re-entrant: no self-deadlock
            assert locks.held_here() == [str(tmp_path / ".x.lock")]
        assert locks.held_here() == [str(tmp_path / ".x.lock")]
        holder = json.loads((tmp_path / ".x.lock.holder").read_text())
        assert holder["pid"] == os.getpid()
    assert locks.held_here() == [] and not (tmp_path / ".x.lock.holder").exists()


def test_a_failed_pass_releases_the_claims_it_took(tmp_path):
    """`share_pending`: when a pass raises after claiming items (a refused unit while encoding
    a shard), its claims are released before the error goes on, so this process holds nothing
    and another can claim the item; without the release the claim outlives the error."""
    items = [0, 1, 2]
    path_of = lambda i: tmp_path / f"item-{i}"  # noqa: E731

    def run(pending):
        for item in locks.claim_each(pending, path_of, lambda i: False, "item"):
            if item == 1:
                raise DataError(path_of(item), None, None, "refused")

    with pytest.raises(DataError, match="refused"):
        locks.share_pending(items, lambda i: path_of(i).exists(), path_of, run, "item")
    assert locks.held_here() == []

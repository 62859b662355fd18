"""Child processes whose merged output is collected while they run (concurrency tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Proc:
    """`cmd` started in its own session (so `kill()` reaches its children), stdout and stderr
    merged and read line by line in a thread; `text()` is the output so far with whitespace
    runs collapsed (rich wraps long log lines)."""

    def __init__(self, cmd: Sequence[str], env: Mapping[str, str], cwd: Path = REPO) -> None:
        self.p = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.pid, self.lines = self.p.pid, []
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(self.p.stdout), daemon=True
        )
        self._reader.start()

    def text(self) -> str:
        return " ".join(" ".join(self.lines).split())

    def until(self, needle: str, timeout: float = 600.0) -> None:
        """Wait until `needle` is in the output; fails if the process ends or time runs out."""
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert self.p.poll() is None, f"ended without {needle!r}: {self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {needle!r} in {timeout} s"
            time.sleep(0.05)

    def finish(self, timeout: float = 900.0, ok: bool = True) -> str:
        """Wait for the end; the output (asserting exit 0 when `ok`)."""
        self.p.wait(timeout)
        self._reader.join(timeout)
        if ok:
            assert self.p.returncode == 0, self.text()[-4000:]
        return self.text()

    def kill(self) -> None:
        """SIGKILL the process group."""
        if self.p.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
        self.p.wait()
        self._reader.join(10)

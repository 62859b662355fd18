"""The README's "After `make demo`" section, run as written on a fresh demo sweep (`slow`).

A fresh working tree (the repository's entry scripts, `conf/` and `data/` linked into a
temporary folder that is `PROJECT_ROOT`, with an empty cache) runs `make demo`'s command,
then every shell block of the section in one bash session, as a reader would paste them:
the outputs listing, the explorer started, queried and stopped, and the Python API. The only
change to the blocks is the explorer's port (8000 -> a free one), so the test cannot collide
with a service already running.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.docs import fenced_blocks

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SECTION = "## After `make demo`"
LINKED = ("evaluate.py", "index.py", "serve.py", "train.py", "conf", "data")
TIMEOUT_S = 1800  # per command; a loaded 2-core machine runs the demo in minutes


def section_blocks(text: str, heading: str) -> list[str]:
    """The ```bash blocks of the README section that starts at `heading` (to the next `## `)."""
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return [block for _, block in fenced_blocks(text[start : end if end >= 0 else None], "bash")]


def make_demo_command() -> list[str]:
    """`make demo`'s recipe (the Makefile's `$(PY) evaluate.py ...` line) as an argv."""
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    recipe = lines[lines.index("demo: setup") + 1].strip()
    assert recipe.startswith("$(PY) "), recipe
    return [sys.executable, *recipe.split()[1:]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`argv` in its own process group, killed whole (a background server included) on timeout."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{argv[:3]} ran over {TIMEOUT_S} s\n{out[-3000:]}\n{err[-3000:]}")
    finally:
        # whatever the commands left running (a server whose `kill %1` never came)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture(scope="module")
def demo_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh tree after `make demo`: its folder and the environment to run commands in."""
    root = tmp_path_factory.mktemp("fresh")
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DENSEX_", "PYTEST_"))}
    env.update(
        PROJECT_ROOT=str(root), DENSEX_CACHE_DIR=str(root / ".cache"), HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )  # fmt: skip
    done = run(make_demo_command(), root, env)
    assert done.returncode == 0, done.stderr[-4000:]
    return root, env


def test_readme_after_make_demo_runs_as_written(demo_tree: tuple[Path, dict[str, str]]) -> None:
    root, env = demo_tree
    blocks = section_blocks((REPO / "README.md").read_text(encoding="utf-8"), SECTION)
    assert len(blocks) == 3, "the section shows the outputs, the explorer and the Python API"
    script = "\n".join(blocks)
    assert "serve.port=8000" in script and "python serve.py experiment=demo" in script
    assert "densex.open_index('experiment=demo')" in script
    port = str(free_port())
    script = "set -euo pipefail\n" + script.replace("8000", port)
    done = run(["bash", "-c", script], root, env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    out = done.stdout
    # the outputs listing names the sweep's files, and its Table 2 has the R@1 column
    for name in ("table2.md", "table2.csv", "significance.csv", "answer_recall_by_words.png"):
        assert name in out, f"`ls` of the demo sweep lacks {name}"
    assert "R@1" in out
    # the explorer answered the query (JSON results naming the demo's Kessingbury passages)
    assert '"units"' in out and "Kessingbury" in out
    # the Python API compared the three granularities
    for granularity in ("passage", "sentence", "proposition"):
        assert re.search(rf"\b{granularity} \[\('Kessingbury#", out), out[-2000:]


def test_open_index_on_the_built_demo_is_quiet(demo_tree: tuple[Path, dict[str, str]]) -> None:
    """The README's one-line Python API call prints nothing once the demo's indexes exist."""
    root, env = demo_tree
    done = run(
        [sys.executable, "-c", "import densex; densex.open_index('experiment=demo')"], root, env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "" and done.stderr == "", f"printed:\n{done.stdout}{done.stderr}"[:3000]

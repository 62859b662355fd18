"""`python <entry>.py --help`: only the groups the entry reads, no internal `schema*` options,
three examples, answered without Hydra or any heavy library (the time itself is measured by
hand, not asserted: `time python evaluate.py --help`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from densex.pipelines.entry_help import config_groups, entry_help, help_requested
from helpers.env import subprocess_env

ENTRIES = ("evaluate", "index", "train", "serve")
TRAIN_ONLY = ("data", "model", "callbacks", "debug")
EVALUATE_ONLY = ("retriever", "granularity", "dataset", "reader", "corpus")


def _help(repo_root, entry: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-X", "importtime", str(repo_root / f"{entry}.py"), *args],
        cwd=repo_root, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("entry", ENTRIES)
def test_help_lists_the_entry_groups_and_three_examples_without_hydra(repo_root, entry):
    proc = _help(repo_root, entry, "retriever=dpr", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert text == entry_help(entry, repo_root / "conf")
    examples = [line for line in text.splitlines() if line.strip().startswith(f"python {entry}.py")]
    assert len(examples) == 3, text
    listed = {line.split(": ")[0] for line in text.split("== Configuration groups")[1].splitlines()
              if ": " in line and not line.startswith(("Override", "Hydra"))}  # fmt: skip
    assert listed == set(config_groups(entry, repo_root / "conf"))
    assert "schema" not in text and "$APP_CONFIG_GROUPS" not in text
    if entry != "train":
        assert not listed & set(TRAIN_ONLY), listed
        assert "smoke-train" not in text and "propositionizer-cpu" not in text
    else:
        assert not listed & set(EVALUATE_ONLY), listed
    # nothing but the help module and PyYAML: no Hydra composition, no torch
    imported = {ln.rsplit("|", 1)[1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    assert "densex.pipelines.entry_help" in imported
    assert not imported & {"hydra", "omegaconf", "torch", "densex.pipelines.schemas"}


def test_evaluate_help_names_its_experiments_and_hydra_help_stays_hydra(repo_root):
    groups = config_groups("evaluate", repo_root / "conf")
    assert groups["experiment"] == [
        "demo", "squad-open", "squad-train", "squad-train-props", "table2", "table3"
    ]  # fmt: skip
    assert "hydra/launcher" in groups and "task" in groups
    assert "experiment" not in config_groups("index", repo_root / "conf")  # none is for it
    assert help_requested(["-h"]) and help_requested(["x=1", "--help"])
    assert not help_requested(["--hydra-help"]) and not help_requested(["--help", "--hydra-help"])
    proc = subprocess.run([sys.executable, str(repo_root / "evaluate.py"), "--hydra-help"],
                          cwd=repo_root, env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0 and "Hydra (" in proc.stdout

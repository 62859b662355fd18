"""Hydra `-m` + Lightning `ddp`: inside a local multirun a plain `ddp` would re-run the whole
sweep in every extra rank (Lightning re-launches `sys.argv`), so it becomes `ddp_spawn`; under
SLURM or torchrun (processes started externally) it is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import open_dict

from densex.utils.trainer import _processes, multirun_safe_strategy, trainer_kwargs
from helpers.requires import require_module

ENV_KEYS = ("SLURM_NTASKS", "SLURM_JOB_NAME", "RANK", "GROUP_RANK", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID")  # fmt: skip


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


@pytest.fixture
def hydra_job(repo_root: Path):
    """A Hydra job context like the one a sweep gives each job; `mode` set by the test."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        cfg = compose("index", return_hydra_config=True)

    def enter(mode: RunMode) -> None:
        with open_dict(cfg):
            cfg.hydra.mode = mode
        HydraConfig.instance().set_config(cfg)

    yield enter
    HydraConfig.instance().cfg = None
    GlobalHydra.instance().clear()


def test_processes() -> None:
    assert _processes(2, 1) == 2 and _processes("4", 2) == 8 and _processes([0, 1], 1) == 2
    assert _processes("0,1,2", None) == 3 and _processes(1, 1) == 1
    assert _processes("auto", 1) is None and _processes(-1, 1) is None


def test_outside_a_multirun_ddp_is_kept(no_launcher, hydra_job) -> None:
    assert multirun_safe_strategy("ddp", 2) == "ddp"  # no Hydra job at all
    hydra_job(RunMode.RUN)  # a single run: Lightning's own Hydra re-launch is right
    assert multirun_safe_strategy("ddp", 2) == "ddp"


def test_local_multirun_ddp_becomes_spawn(no_launcher, hydra_job) -> None:
    hydra_job(RunMode.MULTIRUN)
    assert multirun_safe_strategy("ddp", 2) == "ddp_spawn"
    assert multirun_safe_strategy("ddp", "auto") == "ddp_spawn"
    assert multirun_safe_strategy("ddp", 1, 1) == "ddp"  # one process: nothing re-launched
    assert multirun_safe_strategy("ddp_spawn", 2) == "ddp_spawn"
    assert multirun_safe_strategy("auto", 2) == "auto"
    kwargs = trainer_kwargs({"accelerator": "cpu", "devices": 2, "strategy": "ddp"})
    assert kwargs["strategy"] == "ddp_spawn"


def test_slurm_and_torchrun_keep_ddp(no_launcher, hydra_job) -> None:
    hydra_job(RunMode.MULTIRUN)
    no_launcher.setenv("SLURM_NTASKS", "8")  # srun started one task per device
    no_launcher.setenv("SLURM_JOB_NAME", "densex")
    assert multirun_safe_strategy("ddp", 8, 2) == "ddp"
    no_launcher.delenv("SLURM_NTASKS")
    for key, value in {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"}.items():  # fmt: skip
        no_launcher.setenv(key, value)
    assert multirun_safe_strategy("ddp", 2) == "ddp"


@pytest.mark.slow
def test_multirun_sweep_with_ddp_runs_each_job_once(repo_root: Path, tmp_path: Path) -> None:
    """A real `index.py -m` sweep of 2 jobs, each encoding with 2 CPU ranks, `strategy=ddp`.
    Without the switch to ddp_spawn, rank 1 of job 0 re-runs `index.py -m ...` and its output
    shows a second "Launching 2 jobs" (seen with Lightning 2.6.6)."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env.update(PYTHONPATH=str(repo_root / "src"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    sweep = tmp_path / "sweep"
    caches = [tmp_path / "c0", tmp_path / "c1"]  # two jobs that both encode
    cmd = [sys.executable, "index.py", "-m", "stage=embed", "corpus=demo", "retriever=minilm",
           "granularity=passage", "trainer=cpu", "trainer.devices=2", "trainer.strategy=ddp",
           "cache.embedding_shard_size=16", f"paths.cache_dir={caches[0]},{caches[1]}",
           f"paths.log_dir={tmp_path / 'logs'}", f"hydra.sweep.dir={sweep}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert out.count("Launching 2 jobs") == 1, out[-4000:]
    assert "using ddp_spawn" in out
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for cache in caches:
        (manifest,) = (cache / "embeddings" / "minilm").glob("*/manifest.json")
        m = json.loads(manifest.read_text())
        assert (m["count"], m["processes"]) == (51, 2)


def test_slurm_ddp_launcher_sizes_follow_the_trainer(repo_root: Path) -> None:
    """`hydra/launcher=slurm_ddp`: one SLURM task per device on every node, the layout
    Lightning's SLURMEnvironment checks (ntasks-per-node == devices)."""
    require_module("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher>=1.2")
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    overrides = ["hydra/launcher=slurm_ddp", "trainer=gpu", "trainer.strategy=ddp",
                 "trainer.num_nodes=4", "trainer.devices=8"]  # fmt: skip
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        cfg = compose("index", overrides=overrides, return_hydra_config=True)
    GlobalHydra.instance().clear()
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    launcher = {k: OmegaConf.select(cfg, f"hydra.launcher.{k}") for k in launcher}
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert (launcher["nodes"], launcher["tasks_per_node"], launcher["gpus_per_node"]) == (4, 8, 8)

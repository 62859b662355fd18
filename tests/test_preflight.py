"""Preflight: a bad path or an offline model that is not cached fails in seconds, naming the
config key, the hub id and the override; the grid of a sweep is checked and sized once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from densex.pipelines.preflight.grid import grid_overrides
from densex.pipelines.preflight.hub import PreflightError
from densex.pipelines.preflight.run import preflight
from densex.pipelines.preflight.sizes import estimate_cell_bytes
from helpers.config import compose_config


def _cfg(repo_root, name, *overrides, hydra=False):
    return compose_config(name, *overrides, hydra=hydra)


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    """Offline, with a Hugging Face cache that holds nothing."""
    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "hf-cache"


def test_missing_dataset_path_names_the_key(repo_root, tmp_path):
    cfg = _cfg(
        repo_root,
        "evaluate",
        "corpus=demo",
        "dataset=nq",
        f"dataset.path={tmp_path}/nq-tset.tsv",
        f"paths.cache_dir={tmp_path}",
    )
    with pytest.raises(PreflightError, match=r"dataset\.path=.*nq-tset\.tsv: file not found"):
        preflight(cfg, "evaluate")


def test_bad_first_record_names_key_file_and_line(repo_root, tmp_path):
    bad = tmp_path / "passages.jsonl"
    bad.write_text('\n{"id": "a", "text": ""}\n')
    cfg = _cfg(repo_root, "evaluate", "corpus=demo", "dataset=demo", f"corpus.passages={bad}")
    with pytest.raises(
        PreflightError, match=r"passages\.jsonl:2: field 'text': empty \(corpus\.passages\)"
    ):
        preflight(cfg, "evaluate")


def test_offline_retriever_model_names_key_hub_id_and_override(repo_root, tmp_path, empty_hf_cache):
    cfg = _cfg(repo_root, "evaluate", "corpus=demo", "dataset=demo", "retriever=contriever")
    with pytest.raises(PreflightError) as e:
        preflight(cfg, "evaluate")
    msg = str(e.value)
    assert "retriever.query_model" in msg and "'facebook/contriever'" in msg
    assert "retriever.query_model=/local/dir" in msg and "offline" in msg


def test_offline_train_model_names_key_hub_id_and_override(repo_root, squad_open, empty_hf_cache):
    """The data check passes (the shared pairs, found where the fixture found them), so the
    error is the model's."""
    data_dir = f"paths.data_dir={squad_open.parent}"
    cfg = _cfg(repo_root, "train", "model=flan-t5-large", "data=squad-open", data_dir)
    with pytest.raises(PreflightError) as e:
        preflight(cfg, "train")
    msg = str(e.value)
    assert msg.startswith("model.name_or_path"), msg
    assert "model.name_or_path" in msg and "'google/flan-t5-large'" in msg
    assert "model.name_or_path=/local/dir" in msg and "model=tiny" in msg


def test_local_and_packaged_models_pass(repo_root, tmp_path, empty_hf_cache):
    cfg = _cfg(repo_root, "evaluate", "corpus=demo", "dataset=demo", "retriever=minilm")
    info = preflight(cfg, "evaluate")
    assert info["models"] == {"retriever.query_model": "packaged"}
    assert info["n_questions"] == 150 and 0 < info["estimate_bytes"] < 1_000_000
    missing = tmp_path / "no-such-model"
    cfg = _cfg(repo_root, "evaluate", "corpus=demo", f"retriever.query_model={missing}")
    with pytest.raises(PreflightError, match=r"retriever\.query_model=.*no such directory"):
        preflight(cfg, "evaluate")


def test_entry_prints_one_line_and_no_traceback(repo_root, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [
            sys.executable,
            str(repo_root / "evaluate.py"),
            "corpus=demo",
            "dataset=nq",
            f"dataset.path={tmp_path}/nq-tset.tsv",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error (preflight): dataset.path=") and "file not found" in line
    assert "file not found" in (tmp_path / "run" / "evaluate.log").read_text()


def test_preflight_runs_before_torch_lightning_and_spacy_are_imported(repo_root, tmp_path):
    """The whole preflight of a demo cell (corpus read, models resolved, then the dataset
    check fails) imports no torch, Lightning or spaCy: a bad input is reported in seconds
    (transformers.utils.logging, 0.5 s, is imported by the one logging set-up)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(repo_root / "evaluate.py"), "corpus=demo",
         "dataset=nq", f"dataset.path={tmp_path}/nq-tset.tsv", f"hydra.run.dir={tmp_path}/run"],
        cwd=repo_root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and "error (preflight): dataset.path=" in proc.stderr
    imported = {ln.rsplit("|", 1)[1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    assert "densex.pipelines.preflight.inputs" in imported  # the check did run
    assert not imported & {"torch", "pytorch_lightning", "spacy"}


def test_paper_grid_is_expanded_and_sized(repo_root):
    cfg = _cfg(repo_root, "evaluate", "experiment=table3", hydra=True)
    cells = grid_overrides(cfg)
    assert len(cells) == 6 * 3 * 5 * 2  # retriever x granularity x dataset x budget
    assert len({tuple(sorted(c)) for c in cells}) == len(cells)
    # default outputs: no passage text, gzip -> well under 20 MB for 7,431 questions
    cell = _cfg(repo_root, "evaluate", "corpus=demo", "dataset=demo")
    assert estimate_cell_bytes(cell, 7431) < 20e6
    text = _cfg(repo_root, "evaluate", "corpus=demo", "dataset=demo", "retrieval_text=true")
    assert estimate_cell_bytes(text, 7431) > 5 * estimate_cell_bytes(cell, 7431)


def test_train_help_lists_exactly_the_groups_train_reads(repo_root):
    from densex.pipelines.entry_help import entry_help

    text = entry_help("train", repo_root / "conf")  # what `python train.py --help` prints
    listed = {}
    for line in text.splitlines():
        group, sep, options = line.partition(": ")
        if sep and group in ("data", "model", "trainer", "logger", "callbacks", "paths"):
            listed[group] = {o.strip() for o in options.split(",")}
    assert set(listed) == {"data", "model", "trainer", "logger", "callbacks", "paths"}
    for group, options in listed.items():
        assert options == {p.stem for p in (repo_root / "conf" / group).glob("*.yaml")}, group
    assert "retriever" not in text


@pytest.mark.parametrize(
    "rule",
    [
        "coverage_penalty=2",
        "no_repeat_proposition=true",
        "prop_bonus=0.5",
        "title_penalty=2",
        "end_penalty=2",
        "split_bonus=0.5",
    ],
)
def test_a_copy_student_rule_on_another_model_names_the_key(repo_root, tiny_t5, tmp_path, rule):
    generate = [
        "corpus=demo",
        "dataset=demo",
        "granularity=proposition",
        "corpus.propositions=null",
    ]
    cfg = _cfg(repo_root, "evaluate", *generate, "propositionizer=model",
               f"propositionizer.model={tiny_t5}", f"propositionizer.{rule}")  # fmt: skip
    key = rule.split("=")[0]
    with pytest.raises(PreflightError, match=rf"propositionizer\.{key}=.* copy student .*'t5'"):
        preflight(cfg, "evaluate")
    student = tmp_path / "student"  # what preflight reads of an export: its config.json
    student.mkdir()
    (student / "config.json").write_text('{"model_type": "densex-copy-lm"}')
    cfg = _cfg(repo_root, "evaluate", *generate, "propositionizer=model",
               f"propositionizer.model={student}", f"propositionizer.{rule}")  # fmt: skip
    assert preflight(cfg, "evaluate")["models"]["propositionizer.model"] == "local"

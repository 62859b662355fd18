"""Preflight: a bad path or an offline model that is not cached fails in seconds, naming the
config key, the hub id and the override; the grid of a sweep is checked and sized once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from densex.pipelines.preflight.grid import grid_overrides
from densex.pipelines.preflight.hub import PreflightError
from densex.pipelines.preflight.inputs import check_train_data
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
        "end_penalty=2",
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


def _write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _source_files(root, name, titles, squad_json):
    """Two passages and their propositions per title, one question per title, in the layout
    of conf/data/squad-sources.yaml under `root` (paths.data_dir)."""
    passages = [{"id": f"{t}#{k}", "title": t, "text": f"{t} has the fact {k}."}
                for t in titles for k in range(2)]  # fmt: skip
    _write_jsonl(root / name / "passages.jsonl", passages)
    _write_jsonl(root / name / "propositions.jsonl",
                 [{"id": p["id"], "propositions": [p["text"]]} for p in passages])  # fmt: skip
    _write_jsonl(root / name / "questions.jsonl",
                 [{"id": t, "question": f"what of {t}?", "answers": ["fact"]} for t in titles])  # fmt: skip
    (root / name / squad_json).write_text(json.dumps({"data": []}))


@pytest.fixture
def sources_data(tmp_path):
    """A paths.data_dir with both sources of data=squad-sources (a few small articles each),
    and the composed `data` node that reads it."""
    _source_files(tmp_path, "squad-open", [f"Open {k}" for k in range(6)], "squad-dev-v1.1.json")
    _source_files(
        tmp_path, "squad-train", [f"Train {k}" for k in range(6)], "squad-train-v1.1.json"
    )

    def data(*overrides):
        return compose_config("train", "data=squad-sources", f"paths.data_dir={tmp_path}",
                              *overrides).data  # fmt: skip

    return tmp_path, data


def test_sources_pass_preflight_and_name_each_file(sources_data):
    root, data = sources_data
    inputs = check_train_data(data())
    assert inputs["data.sources[1].propositions"] == str(root / "squad-train/propositions.jsonl")
    assert inputs["data.sources[0].questions"] == str(root / "squad-open/questions.jsonl")
    assert len(inputs) == 8  # passages, propositions, squad_json, questions of each source


@pytest.mark.parametrize(
    ("file", "key"),
    [
        ("squad-train/propositions.jsonl", "data.sources[1].propositions"),
        ("squad-open/passages.jsonl", "data.sources[0].passages"),
        ("squad-train/squad-train-v1.1.json", "data.sources[1].squad_json"),
        ("squad-open/questions.jsonl", "data.sources[0].questions"),
    ],
)
def test_a_missing_source_file_names_the_file_and_its_key(sources_data, file, key):
    root, data = sources_data
    (root / file).unlink()
    with pytest.raises(PreflightError) as e:
        check_train_data(data())
    assert str(e.value) == f"{root / file}: file not found ({key})"


@pytest.mark.parametrize(
    ("file", "line", "key", "message"),
    [
        ("squad-train/passages.jsonl", '{"id": "Train 9#0", "title": "Train 9"}',
         "data.sources[1].passages", "field 'text': missing"),
        ("squad-open/propositions.jsonl", '{"id": "Open 1#0", "propositions": []}',
         "data.sources[0].propositions", "field 'propositions': empty list of propositions"),
    ],
)  # fmt: skip
def test_a_bad_source_row_is_located_by_file_line_and_field(sources_data, file, line, key,
                                                            message):  # fmt: skip
    """The row replaces the file's third line: the reader's located message, then the key."""
    root, data = sources_data
    rows = (root / file).read_text().splitlines()
    rows[2] = line
    (root / file).write_text("\n".join(rows) + "\n")
    with pytest.raises(PreflightError) as e:
        check_train_data(data())
    assert str(e.value) == f"{root / file}:3: {message} ({key})"


def test_the_sources_split_is_checked_as_the_data_module_makes_it(sources_data):
    root, data = sources_data
    with pytest.raises(PreflightError, match=r"data\.train_articles=99: .* has 10 articles"):
        check_train_data(data("data.train_articles=99"))
    with pytest.raises(PreflightError, match=r"data\.val_fraction=0\.1: null with data\.format"):
        check_train_data(data("data.val_fraction=0.1"))
    with pytest.raises(PreflightError, match=r"data\.sources\[1\]: .*'nme'"):
        check_train_data(data("+data.sources.1.nme=x"))
    shared = root / "squad-open" / "passages.jsonl"  # an article of both sources
    shared.write_text(shared.read_text().replace("Open 5", "Train 5"))
    (root / "squad-open/propositions.jsonl").write_text(
        (root / "squad-open/propositions.jsonl").read_text().replace("Open 5", "Train 5")
    )
    with pytest.raises(
        PreflightError, match=r"article 'Train 5' is in 'squad-open' and 'squad-train'"
    ):
        check_train_data(data())


def test_the_train_entry_checks_the_sources_before_its_model(repo_root, sources_data):
    root, _ = sources_data
    (root / "squad-train" / "propositions.jsonl").unlink()
    cfg = _cfg(repo_root, "train", "experiment=propositionizer-copy-cpu",
               f"paths.data_dir={root}")  # fmt: skip
    with pytest.raises(
        PreflightError, match=r"file not found \(data\.sources\[1\]\.propositions\)"
    ):
        preflight(cfg, "train")

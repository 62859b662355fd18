"""Preflight checks of the models a job loads, per entry: the retriever's encoders, the reader
and a model propositionizer (index / evaluate), or the model to fine-tune and the set-F1
metric's backbone (train).

Contract: each returns `{config key: where the model loads from}` (`check_model`'s answer)
for the models the job will actually load, or raises a `PreflightError` naming the key and
the override that fixes it.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from densex.pipelines.index.units import generates_propositions
from densex.pipelines.preflight.hub import PreflightError, check_model
from densex.propositionizer.settings import COPY_STUDENT_RULES
from densex.propositionizer.surface import COPY_MODEL_TYPE
from densex.utils.models import resolve_model


def check_retrieval_models(cfg: DictConfig, entry: str) -> dict[str, str]:
    """Retriever encoders (dense), reader (evaluate), model propositionizer (when used)."""
    found: dict[str, str] = {}
    r = cfg.retriever
    encodes = not (entry == "index" and cfg.get("stage") in ("units", "propositions"))
    if encodes:
        check_late_units(cfg)
    if encodes and str(r.get("type", "dense")) not in ("sparse", "hash"):  # no model
        for key in ("query_model", "doc_model"):
            name = r.get(key)
            if key == "doc_model" and not name:
                continue
            found[f"retriever.{key}"] = check_model(
                name, f"retriever.{key}", [f"retriever.{key}=/local/dir", "retriever=minilm"]
            )
    reader = cfg.get("reader")
    if entry == "evaluate" and isinstance(reader, DictConfig) and "model" in reader:
        found["reader.model"] = check_model(
            reader.get("model"), "reader.model", ["reader.model=/local/dir", "reader=tiny"]
        )

    prop = cfg.get("propositionizer") or {}
    if str(prop.get("type", "file")) == "model" and generates_propositions(cfg):
        found["propositionizer.model"] = check_model(
            prop.get("model"), "propositionizer.model", ["propositionizer.model=/local/dir"]
        )
        check_copy_student_rules(prop)
    return found


def check_late_units(cfg: DictConfig) -> None:
    """`retriever.late_chunking=true` pools each unit's span of its passage's tokens: a cell
    whose units (its granularity, the members of a `mixed` or fused cell) include generated
    propositions, which are no span of their passage, is a `PreflightError` naming the key."""
    r = cfg.get("retriever")
    if not (isinstance(r, DictConfig) and r.get("late_chunking")):
        return
    gran = cfg.get("granularity")
    grans = list(gran.get("members") or [gran.get("name")]) if isinstance(gran, DictConfig) else []
    fusion = cfg.get("fusion")
    for m in (fusion.get("members") or []) if isinstance(fusion, DictConfig) else []:
        grans.append((m.get("granularity") if m else None) or gran.get("name"))
    if "proposition" in grans:
        raise PreflightError(
            "retriever.late_chunking=true: proposition units are generated text, not spans of "
            "their passage, and late chunking pools a unit's span of its passage's token states."
            " Fix: retriever.late_chunking=false for granularity=proposition, or "
            "granularity=sentence (or passage) with late chunking"
        )


def check_copy_student_rules(prop: DictConfig) -> None:
    """A copy-student decoding rule set for a model that is not one (read from its local
    `config.json`; a hub model not downloaded yet is not read): a `PreflightError` naming the
    key, before the model loads (transformers would reject the unknown `generate` argument
    only then)."""
    rules = [r for r in COPY_STUDENT_RULES if prop.get(r) not in (None, False, 0)]
    config = Path(resolve_model(str(prop.get("model")))) / "config.json"
    if not rules or not config.is_file():
        return
    model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    if model_type != COPY_MODEL_TYPE:
        raise PreflightError(
            f"propositionizer.{rules[0]}={prop.get(rules[0])} is a decoding rule of the copy "
            f"student (model=minilm-copy), but {prop.get('model')} is a {model_type!r} model. "
            f"Fix: propositionizer.{rules[0]}=null"
        )


def check_train_models(model: DictConfig) -> dict[str, str]:
    """The model to fine-tune (with a `warm_start`, the checkpoint it is built from) and the
    set-F1 metric's backbone."""
    warm = model.get("warm_start") or {}
    key = "model.warm_start.encoder" if warm else "model.name_or_path"
    found = {
        key: check_model(
            warm.get("encoder", "packaged:minilm") if warm else model.get("name_or_path"),
            key,
            [f"{key}=/local/dir", "model=tiny (a CPU smoke run)"],
        )
    }
    metric = model.get("metric") or {}
    if metric.get("model_type"):
        found["model.metric.model_type"] = check_model(
            metric.get("model_type"),
            "model.metric.model_type",
            ["model.metric.model_type=/local/dir (+ model.metric.num_layers)", "model=tiny"],
        )
    return found

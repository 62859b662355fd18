"""Preflight: fail in seconds, with the fix named, before any heavy work.

Every entry point (`train.py`, `index.py`, `evaluate.py`) goes through `main(cfg, entry)`:
logging is set up once (`verbose=true` shows everything), then `preflight(cfg, entry)` checks

- every input path exists and its first record parses (questions are all loaded: they are
  small and their count sizes the outputs);
- every model resolves: a local directory, the Hugging Face cache, or the hub when online.
  Offline and missing gives one short error naming the config key, the hub id and the
  override to use (`retriever.query_model=/local/dir`, `model.name_or_path=...`, `model=tiny`);
- the estimated size of the run's outputs, against the free space where they go.

A `PreflightError` or `DataError` is printed as its message alone (no library traceback)
and the process exits with status 2; `HYDRA_FULL_ERROR=1` re-raises it with the traceback.
For a multirun, `grid_preflight` (called by the sweep callback before the first job) checks
each distinct dataset and model of the grid once and prints the grid's estimated disk use.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from densex.pipelines.index import generates_propositions
from densex.utils.io import DataError, check_fields
from densex.utils.logging import get_logger, setup_logging
from densex.utils.models import resolve_model

log = get_logger(__name__)

ENTRIES = ("train", "index", "evaluate")


class PreflightError(Exception):
    """A configuration that cannot run, with the key to change and how."""


# ----------------------------------------------------------------------------- entry point


def main(cfg: DictConfig, entry: str) -> float | None:
    """Set up logging, run the preflight, then `densex.pipelines.<entry>.run(cfg)`.

    Bad input or configuration (a `PreflightError` or `DataError`, at preflight or later)
    ends the process with its message and status 2, unless HYDRA_FULL_ERROR=1.
    """
    import importlib

    setup_logging(bool(cfg.get("verbose", False)))
    try:
        preflight(cfg, entry)
        run: Callable[[DictConfig], Any] = importlib.import_module(f"densex.pipelines.{entry}").run
        return run(cfg)
    except (PreflightError, DataError) as e:
        fail(e)
    return None  # pragma: no cover - fail() exits


def fail(error: BaseException) -> None:
    """Report a configuration/input error as one message and exit 2 (raise with
    HYDRA_FULL_ERROR=1)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    kind = "preflight" if isinstance(error, PreflightError) else "bad input"
    log.error("%s: %s", kind, error)
    print(f"error ({kind}): {error}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def preflight(cfg: DictConfig, entry: str) -> dict[str, Any]:
    """Check inputs and models of one job and log its estimated output size; return what
    was found (`inputs`, `models`, `n_questions`, `estimate_bytes`). Raises `PreflightError`."""
    if entry not in ENTRIES:
        raise ValueError(f"entry must be one of {ENTRIES}, got {entry!r}")
    if cfg.get("preflight") is False or (entry == "index" and cfg.get("stage") == "plan"):
        return {}  # stage=plan reads no input and loads no model: nothing to check
    info: dict[str, Any] = {"inputs": {}, "models": {}}
    if entry == "train":
        info["inputs"] = check_train_data(cfg.data)
        info["models"] = check_train_models(cfg.model)
    else:
        info["inputs"] = check_corpus(cfg, entry)
        info["models"] = check_retrieval_models(cfg, entry)
    if entry == "evaluate":
        questions = check_dataset(cfg.dataset, cfg.get("limit_questions"))
        info["n_questions"] = questions
        info["estimate_bytes"] = estimate_cell_bytes(cfg, questions)
        where = _output_dir(cfg)
        log.info(
            "preflight ok: %d questions; models %s; estimated outputs %s in %s (%s free)",
            questions,
            _models_text(info["models"]),
            human_bytes(info["estimate_bytes"]),
            where,
            human_bytes(free_bytes(where)),
        )
        _warn_space(info["estimate_bytes"], where)
    elif entry == "train":
        info["estimate_bytes"] = estimate_train_bytes(cfg, info["models"])
        where = _output_dir(cfg)
        log.info(
            "preflight ok: models %s; estimated checkpoints + export %s in %s (%s free)",
            _models_text(info["models"]),
            human_bytes(info["estimate_bytes"]),
            where,
            human_bytes(free_bytes(where)),
        )
        _warn_space(info["estimate_bytes"], where)
    else:
        cache = Path(str(cfg.paths.cache_dir))
        log.info(
            "preflight ok: models %s; artifacts go to %s (%s free)",
            _models_text(info["models"]),
            cache,
            human_bytes(free_bytes(cache)),
        )
    return info


# ----------------------------------------------------------------------------- inputs


def first_record(path: str | os.PathLike, key: str, nonempty: Sequence[str] = ()) -> dict:
    """The first JSON object of a JSONL file, checked; a `PreflightError` naming `key` if the
    file is missing, empty or its first record does not parse."""
    p = Path(os.path.expanduser(str(path)))
    if not p.exists():
        raise PreflightError(f"{key}={path}: file not found")
    if p.is_dir():
        raise PreflightError(f"{key}={path}: a directory, expected a JSONL file")
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise PreflightError(
                    f"{key}: {p}:{lineno}: invalid JSON ({e.msg} at column {e.colno})"
                ) from None
            if not isinstance(row, dict):
                raise PreflightError(f"{key}: {p}:{lineno}: expected a JSON object")
            try:
                check_fields(row, p, lineno, nonempty=nonempty)
            except DataError as e:
                raise PreflightError(f"{key}: {e}") from None
            return row
    raise PreflightError(f"{key}={path}: empty file")


def _squad_json(path: str, key: str) -> None:
    p = Path(os.path.expanduser(path))
    if not p.exists():
        raise PreflightError(f"{key}={path}: file not found")
    try:
        with p.open(encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise PreflightError(f"{key}: {p}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not (isinstance(data, dict) and isinstance(data.get("data"), list) and data["data"]):
        raise PreflightError(f"{key}: {p}: not SQuAD JSON (expected a non-empty 'data' list)")


def _hf_dataset(src: str, key: str) -> str:
    """A `save_to_disk` directory, or a hub dataset that is cached or reachable."""
    if Path(os.path.expanduser(src)).exists():
        return "local"
    if src.startswith((".", "/", "~")):
        raise PreflightError(f"{key}={src}: directory not found")
    if _cached(src, repo_type="dataset"):
        return "HF cache"
    if hub_offline():
        raise PreflightError(
            f"{key}: dataset '{src}' is not in the Hugging Face cache and the hub is offline"
            f" (HF_HUB_OFFLINE=1). Fix: {key}=/path/to/a/save_to_disk/dir, or fetch it where"
            f" the hub is reachable (huggingface-cli download --repo-type dataset {src})"
        )
    return "hub"


def _collection(src: str, granularity: str) -> str:
    """A collection source is a local file or directory, or a hub dataset in the HF cache."""
    if Path(os.path.expanduser(src)).exists():
        return src
    return _hf_dataset(src, f"corpus.sources.{granularity}.path")


def check_corpus(cfg: DictConfig, entry: str) -> dict[str, str]:
    """The corpus inputs of index/evaluate: passages (or documents) and propositions."""
    corpus = cfg.corpus
    out: dict[str, str] = {}
    sources = corpus.get("sources") or {}
    if sources:  # ready-made collections (FactoidWiki): each local file/dir or cached hub id
        wanted = list(corpus.get("granularities") or ("passage", "sentence", "proposition"))
        for g, source in sources.items():
            if source and g in wanted:
                out[f"corpus.sources.{g}"] = _collection(str(source.get("path")), g)
        return out
    if corpus.get("passages"):
        first_record(corpus.passages, "corpus.passages", nonempty=("id", "text"))
        out["corpus.passages"] = str(corpus.passages)
    else:
        src = corpus.get("documents")
        fmt = str(corpus.get("documents_format", "squad"))
        if not src:
            raise PreflightError(
                f"corpus {corpus.get('name')!r}: set corpus.passages=FILE or corpus.documents=..."
            )
        if fmt == "squad":
            _squad_json(str(src), "corpus.documents")
        elif fmt == "jsonl":
            first_record(src, "corpus.documents", nonempty=(corpus.get("text_column", "text"),))
        elif fmt == "hf":
            _hf_dataset(str(src), "corpus.documents")
        out["corpus.documents"] = str(src)
    ptype = str((cfg.get("propositionizer") or {}).get("type", "file"))
    wants_props = cfg.granularity.name == "proposition" or (
        entry == "index" and cfg.get("stage") in ("propositions",)
    )
    if corpus.get("propositions") and ptype == "file":
        first_record(corpus.propositions, "corpus.propositions", nonempty=("id", "propositions"))
        out["corpus.propositions"] = str(corpus.propositions)
    elif wants_props and ptype == "file":
        raise PreflightError(
            "granularity=proposition needs propositions: corpus.propositions=FILE (JSONL"
            ' {"id": passage_id, "propositions": [...]}) or a model propositionizer'
            " (propositionizer=model propositionizer.model=/path/or/hub-id)"
        )
    return out


def check_dataset(dataset: DictConfig, limit: Any = None) -> int:
    """Load the dataset's questions (small files) and return how many there are."""
    fmt = str(dataset.get("format", "jsonl"))
    path = dataset.get("path")
    if fmt == "hf":
        _hf_dataset(str(dataset.get("hf_name") or path), "dataset.hf_name")
    elif path in (None, "", "???"):
        raise PreflightError(f"dataset={dataset.get('name')}: set dataset.path=FILE")
    elif not Path(os.path.expanduser(str(path))).exists():
        raise PreflightError(
            f"dataset.path={path}: file not found (dataset={dataset.get('name')}, format {fmt})"
        )
    # lazy: data.questions pulls torch + spaCy (~4 s); preflight itself loads in 0.2 s
    from densex.data.questions import load_dataset_questions

    try:
        questions = load_dataset_questions(dataset, limit=int(limit) if limit else None)
    except DataError as e:
        raise PreflightError(f"dataset.path: {e}") from None
    except (OSError, ValueError) as e:
        raise PreflightError(f"dataset={dataset.get('name')}: {_first_line(e)}") from None
    if not questions:
        raise PreflightError(f"dataset.path={path}: no questions")
    return len(questions)


def check_train_data(data: DictConfig) -> dict[str, str]:
    """Training pairs: squad-open passages + propositions, or a JSONL/HF `data.path`."""
    fmt = str(data.get("format", "squad-open"))
    out: dict[str, str] = {}
    if fmt == "squad-open":
        first_record(data.passages, "data.passages", nonempty=("id", "text"))
        first_record(data.propositions, "data.propositions", nonempty=("id", "propositions"))
        out = {"data.passages": str(data.passages), "data.propositions": str(data.propositions)}
    elif fmt == "jsonl":
        for key in ("path", "val_path"):
            if data.get(key) not in (None, "???"):
                first_record(data[key], f"data.{key}")
                out[f"data.{key}"] = str(data[key])
        if "data.path" not in out:
            raise PreflightError("data=jsonl: set data.path=FILE (JSONL pairs)")
    elif fmt == "hf":
        if data.get("path") in (None, "???"):
            raise PreflightError("data=hf: set data.path=DIR (a datasets.save_to_disk dir)")
        _hf_dataset(str(data.path), "data.path")
        out["data.path"] = str(data.path)
    return out


# ----------------------------------------------------------------------------- models


def hub_offline() -> bool:
    """Whether the Hugging Face hub must not be contacted (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    truthy = {"1", "true", "yes", "on"}
    return any(
        os.environ.get(v, "").lower() in truthy for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _cached(repo_id: str, repo_type: str = "model") -> bool:
    from huggingface_hub import try_to_load_from_cache

    names = ("README.md", ".gitattributes") if repo_type == "dataset" else ()
    names += ("config.json", "modules.json", "tokenizer_config.json")
    for name in names:
        try:
            hit = try_to_load_from_cache(repo_id, name, repo_type=repo_type)
        except Exception:  # noqa: BLE001 - an id the hub would reject is simply not cached
            return False
        if isinstance(hit, str):
            return True
    return False


def check_model(name: Any, key: str, fixes: Sequence[str]) -> str:
    """Where model `name` (config key `key`) will load from: `local`, `HF cache`, `hub`,
    `packaged` or `built` (model=tiny); else a `PreflightError` naming `key` and `fixes`."""

    fix = " or ".join(fixes)
    if name in (None, "", "???"):
        raise PreflightError(f"{key} is not set. Fix: {fix}")
    name = str(name)
    if name == "tiny":
        return "built"
    try:
        path = resolve_model(name)
    except FileNotFoundError:
        raise PreflightError(f"{key}={name}: no such directory. Fix: {fix}") from None
    except ImportError as e:
        raise PreflightError(f"{key}={name}: {_first_line(e)}") from None
    if name.startswith("packaged:"):
        return "packaged"
    if Path(path).exists():
        return "local"
    if _cached(name):
        return "HF cache"
    if hub_offline():
        raise PreflightError(
            f"{key}: model '{name}' is not in the Hugging Face cache and the hub is offline"
            f" (HF_HUB_OFFLINE=1). Fix: {fixes[0]} (a directory holding the model's files)"
            + "".join(f", or {f}" for f in fixes[1:])
            + f"; or download it where the hub is reachable: huggingface-cli download {name}"
        )
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.utils import RepositoryNotFoundError

        try:
            HfApi().model_info(name, timeout=10)
        except RepositoryNotFoundError:
            raise PreflightError(
                f"{key}: no model '{name}' on the Hugging Face hub. Fix: {fix}"
            ) from None
    except PreflightError:
        raise
    except Exception as e:  # noqa: BLE001 - no answer from the hub, whatever the reason
        raise PreflightError(
            f"{key}: model '{name}' is not cached and the hub did not answer"
            f" ({type(e).__name__}). Fix: {fix}, or set HF_HUB_OFFLINE=1 on machines without"
            " internet"
        ) from None
    return "hub"


def check_retrieval_models(cfg: DictConfig, entry: str) -> dict[str, str]:
    """Retriever encoders (dense), reader (evaluate), model propositionizer (when used)."""
    found: dict[str, str] = {}
    r = cfg.retriever
    encodes = not (entry == "index" and cfg.get("stage") in ("units", "propositions"))
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
    return found


def check_train_models(model: DictConfig) -> dict[str, str]:
    """The model to fine-tune and the set-F1 metric's backbone."""
    found = {
        "model.name_or_path": check_model(
            model.get("name_or_path"),
            "model.name_or_path",
            ["model.name_or_path=/local/dir", "model=tiny (a CPU smoke run)"],
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


# ----------------------------------------------------------------------------- sizes

# bytes per retrieved passage per retrieval file (DPR and pyserini layouts), measured on
# squad-open with MiniLM (ids like `Super_Bowl_50#12`); text adds the passage itself
CTX_BYTES = {"plain": 62, "gzip": 9}
TEXT_GZIP_RATIO = 0.42


def _avg_passage_bytes(cfg: DictConfig, sample: int = 500) -> float:
    path = cfg.corpus.get("passages")
    if not path or not Path(str(path)).exists():
        return 600.0
    sizes = []
    with open(str(path), encoding="utf-8") as f:
        for line in itertools.islice(f, sample):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            sizes.append(len(str(row.get("text", ""))) + len(str(row.get("title", ""))) + 20)
    return sum(sizes) / len(sizes) if sizes else 600.0


def estimate_cell_bytes(cfg: DictConfig, n_questions: int) -> int:
    """Estimated run-dir bytes of one evaluate cell: the two retrieval files (top max(topk)
    passages per question), the curves, reader predictions."""
    k = max(int(x) for x in cfg.topk)
    with_text = bool(cfg.get("retrieval_text", False))
    gz = with_text or bool(cfg.get("retrieval_gzip", True))
    per_ctx = CTX_BYTES["gzip" if gz else "plain"]
    if with_text:
        per_ctx += _avg_passage_bytes(cfg) * (TEXT_GZIP_RATIO if gz else 1.0)
    retrieval = 2 * n_questions * (k * per_ctx + 120)
    curves = 12 * k + 16 * int(cfg.get("recall_curve_max_words", 500)) + 50_000
    reader = cfg.get("reader")
    predictions = 250 * n_questions if isinstance(reader, DictConfig) and "model" in reader else 0
    return int(retrieval + curves + predictions)


def estimate_train_bytes(cfg: DictConfig, models: Mapping[str, str]) -> int:
    """Two checkpoints (best + last: weights + AdamW's two moments) and the exported model."""
    weights = _weights_bytes(str(cfg.model.get("name_or_path")))
    return int(2 * 3 * weights + weights)


def _weights_bytes(name: str) -> int:
    """Size of a model's weight files (local dir or HF cache); 1 MB for `tiny`."""
    if name == "tiny":
        return 1 << 20

    try:
        path = Path(resolve_model(name))
    except (FileNotFoundError, ImportError):
        return 0
    if not path.exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            for fname in ("model.safetensors", "pytorch_model.bin"):
                hit = try_to_load_from_cache(name, fname)
                if isinstance(hit, str):
                    return Path(hit).stat().st_size
        except Exception:  # noqa: BLE001 - size unknown
            return 0
        return 0
    files = [*path.glob("*.safetensors"), *path.glob("*.bin")]
    return sum(f.stat().st_size for f in files)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"  # pragma: no cover


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the file system that holds `path` (its nearest existing parent)."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def _warn_space(need: int, where: Path) -> None:
    free = free_bytes(where)
    if need > free:
        log.warning(
            "estimated outputs (%s) exceed the free space in %s (%s)",
            human_bytes(need),
            where,
            human_bytes(free),
        )


def _output_dir(cfg: DictConfig) -> Path:
    try:
        return Path(str(cfg.paths.output_dir))
    except Exception:  # noqa: BLE001 - outside a Hydra job the interpolation does not resolve
        return Path(str(cfg.paths.get("log_dir", ".")))


def _models_text(models: Mapping[str, str]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in models.items()) or "none"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


# ----------------------------------------------------------------------------- sweeps

# config keys whose value changes neither the inputs read nor the size of a cell's outputs
SIZE_NEUTRAL = ("retriever", "granularity", "index", "budget", "seed", "logger", "trainer")
# ... and those that change neither the corpus nor the models a cell needs
INPUT_NEUTRAL = ("dataset", "index", "budget", "seed", "logger", "trainer", "topk")


def grid_overrides(config: DictConfig) -> list[list[str]]:
    """The override list of every job a multirun will launch: the sweeper's `params` and
    the command line's sweeps (`a=x,y`), as Hydra's basic sweeper expands them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    args = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(args)
    values: dict[str, list[str]] = {}
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            values[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            values[key] = [f"{key}={o.get_value_element_as_str()}"]
    return [list(combo) for combo in itertools.product(*values.values())]


def _compose(config: DictConfig, overrides: Sequence[str]) -> DictConfig:
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    return loader.load_sweep_config(config, list(overrides))


def _project(overrides: Iterable[str], drop: Sequence[str]) -> tuple[str, ...]:
    return tuple(o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in drop)


def grid_preflight(config: DictConfig) -> dict[str, Any]:
    """Before a multirun's first job: check each distinct dataset/corpus and model of the
    grid once, and log the grid's estimated disk use. Returns `{cells, estimate_bytes}`."""
    if config.get("preflight") is False or str(config.get("task_name")) == "train":
        return {}
    cells = grid_overrides(config)
    by_size: dict[tuple[str, ...], int] = {}
    for ov in cells:
        key = _project(ov, SIZE_NEUTRAL)
        by_size[key] = by_size.get(key, 0) + 1
    total = 0
    for key, count in by_size.items():
        cfg = _compose(config, list(key))
        n = check_dataset(cfg.dataset, cfg.get("limit_questions"))
        total += count * estimate_cell_bytes(cfg, n)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    log.info(
        "preflight: %d cells; estimated outputs %s (%s per cell on average) in %s (%s free)",
        len(cells),
        human_bytes(total),
        human_bytes(total / max(len(cells), 1)),
        sweep_dir,
        human_bytes(free_bytes(sweep_dir)),
    )
    _warn_space(total, sweep_dir)
    seen: set[tuple[str, ...]] = set()
    for ov in cells:
        key = _project(ov, INPUT_NEUTRAL)
        if key in seen:
            continue
        seen.add(key)
        cfg = _compose(config, list(key))
        check_corpus(cfg, "evaluate")
        check_retrieval_models(cfg, "evaluate")
    log.info("preflight ok: the grid's datasets, corpora and models")
    return {"cells": len(cells), "estimate_bytes": total}


class GridPreflight(Callback):
    """`hydra.callbacks.preflight` of `conf/evaluate.yaml`: `grid_preflight` before a
    multirun's first job; a failure ends the sweep at once with its message."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        setup_logging(bool(config.get("verbose", False)))
        try:
            grid_preflight(config)
        except (PreflightError, DataError) as e:
            fail(e)

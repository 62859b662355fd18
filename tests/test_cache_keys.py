"""Every cache key of the demo, pinned: a refactor of how the config reaches the key functions
(issue 22: typed specs instead of the config tree) must leave every artifact where it was.

Keys only, nothing encoded: the demo's units are built (51 passages, a second) because the
embedding, index and BM25 keys hash the unit files; the rest is computed from the composed
config as the entry pipelines see it. The values were measured on the code before the
refactor (commit 4dbbf4a); a key that changes here orphans every user's cache.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from densex.corpus.units_key import units_key
from densex.pipelines.compose import PROJECT_ROOT
from densex.pipelines.edge import corpus_spec, propositionizer_settings, trainer_args
from densex.pipelines.index.units import build_corpus_units, propositions_key, unit_file
from densex.propositionizer import fingerprint as fingerprint_module
from densex.propositionizer import model_backend
from densex.propositionizer import settings as settings_module
from densex.propositionizer.fingerprint import model_fingerprint
from densex.propositionizer.teacher_backend import teacher_from_settings
from densex.retrieval.bm25 import bm25_settings
from densex.retrieval.build import embeddings_dir
from densex.retrieval.spec import BM25Spec, IndexSpec, RetrieverSpec
from densex.utils.cache import content_key, hash_file
from helpers.config import compose_config

GRANULARITIES = ("passage", "sentence", "proposition")
FIXED_CACHE = Path("/tmp/densex-cache-keys")  # in the propositionizer settings; never written
HUB_MODEL = "densex/propositionizer-for-keys"  # a hub id: no local files, no mtimes in the key

PINNED = {
    "units": "ce3b2b876008",
    "embeddings/passage": "4722c7441c55",
    "index/passage": "f6f596c449af",
    "embeddings/sentence": "793a8f01cc4b",
    "index/sentence": "947cab887921",
    "embeddings/proposition": "d6468f1f1b15",
    "index/proposition": "50824c3a70fc",
    "bm25/passage": "c44c6a7eca78",
    "bm25/sentence": "a3515b74c904",
    "bm25/proposition": "a40ad61ca455",
    "propositions/model": "9ccbc56f766e",
    "propositions/teacher": "e0b4b540d8ad",
    "model_shards": "465462ee8203",
    "teacher_reply": "b10264d7eae7d0227e2ffc327e66105b36210bb8a91eff01f5981531da6ec72b",
}


def _demo(cache: Path, *overrides: str):
    """`evaluate.py experiment=demo` as one cell of `make demo` composes it."""
    return compose_config("evaluate", "experiment=demo", f"paths.cache_dir={cache}", *overrides)


def _dense_keys(cache: Path, files: Any) -> dict[str, str]:
    """Embeddings and faiss index of each granularity (minilm, flat: the demo's cells)."""
    keys = {}
    for gran in GRANULARITIES:
        cfg = _demo(cache, f"granularity={gran}")
        spec = RetrieverSpec.from_cfg(cfg.retriever)
        spec = dataclasses.replace(spec, export_dir=str(cache / "exports"))  # as build does
        emb = embeddings_dir(unit_file(files, gran), spec, cache)
        keys[f"embeddings/{gran}"] = emb.name
        index = IndexSpec.from_cfg(cfg.index).cache_fields()
        keys[f"index/{gran}"] = content_key(embeddings=emb.name, index=index)
    return keys


def _bm25_keys(cache: Path, files: Any) -> dict[str, str]:
    """`retriever=bm25` over each granularity's demo units."""
    settings = bm25_settings(BM25Spec.from_cfg(_demo(cache, "retriever=bm25").retriever))
    return {
        f"bm25/{gran}": content_key(units=hash_file(unit_file(files, gran)), bm25=settings)
        for gran in GRANULARITIES
    }


def _propositionizer_keys(files: Any) -> dict[str, str]:
    """Generated propositions (model: a hub id whose commit `hub_commit` is patched to give,
    nothing is loaded; teacher: the Figure 8 prompt's hash), a model's shard directory and a
    teacher reply's cache key. The settings are part of these keys, paths included: the cache
    dir is a fixed string (nothing is written there) and the prompt a path relative to the
    repository root (the working directory), so the keys are the same in every clone."""
    model_cfg = _demo(FIXED_CACHE, "granularity=proposition", "propositionizer=model",
                      f"propositionizer.model={HUB_MODEL}", "trainer.accelerator=cpu")  # fmt: skip
    teacher_cfg = _demo(FIXED_CACHE, "granularity=proposition", "propositionizer=teacher",
                        "propositionizer.prompt=conf/prompts/figure8.txt")  # fmt: skip
    passages = Path(files.passages)
    opts = propositionizer_settings(model_cfg.propositionizer)
    settings = model_backend._generation_settings(opts, trainer_args(model_cfg))
    fingerprint = model_fingerprint(HUB_MODEL)
    teacher_opts = propositionizer_settings(teacher_cfg.propositionizer)
    teacher = teacher_from_settings(teacher_opts, default_cache_dir=FIXED_CACHE)
    return {
        "propositions/model": propositions_key(model_cfg, passages),
        "propositions/teacher": propositions_key(teacher_cfg, passages),
        "model_shards": model_backend._shards_key(fingerprint, hash_file(passages), opts, settings),
        "teacher_reply": teacher.cache_key("Title: Demo. Section: . Content: a passage."),
    }


def demo_keys(cache: Path) -> dict[str, str]:
    """Every cache key of the demo's artifacts (and of the generated-propositions variants)."""
    files = build_corpus_units(_demo(cache, "granularity=passage"), with_generated=False)
    units_dir = Path(files.passages).parent
    assert units_dir.parent == cache / "units" / "demo"
    return {
        "units": units_dir.name,
        **_dense_keys(cache, files),
        **_bm25_keys(cache, files),
        **_propositionizer_keys(files),
    }


@pytest.mark.parametrize("native_bf16", [False, True])
def test_every_cache_key_of_the_demo_is_unchanged(tmp_path, monkeypatch, native_bf16) -> None:
    """The pinned keys on a CPU without native bf16 (where they were measured); on a CPU with
    it (AMX, AVX512-BF16) the model's `dtype: auto` runs in bfloat16, so exactly the two keys
    that hash the generation dtype move, and every other artifact stays where it was."""
    monkeypatch.chdir(PROJECT_ROOT)
    monkeypatch.setattr(fingerprint_module, "hub_commit", lambda repo, cache_dir=None: "c0ffee")
    monkeypatch.setattr(fingerprint_module, "cpu_has_bf16", lambda: native_bf16)
    keys = demo_keys(tmp_path)
    moved = {k for k in PINNED if keys[k] != PINNED[k]}
    assert moved == ({"propositions/model", "model_shards"} if native_bf16 else set())


def test_a_new_decoder_version_moves_only_the_generated_propositions(tmp_path, monkeypatch) -> None:
    """Bumping `DECODER_VERSION` (a change that writes other tokens under the same settings)
    gives the model's propositions and shards new keys, so nothing the older code cached is
    reused; every other artifact, and the teacher's outputs, stay where they were."""
    monkeypatch.chdir(PROJECT_ROOT)
    monkeypatch.setattr(fingerprint_module, "hub_commit", lambda repo, cache_dir=None: "c0ffee")
    monkeypatch.setattr(settings_module, "DECODER_VERSION", 1)
    got = demo_keys(tmp_path)
    moved = {name for name in PINNED if got[name] != PINNED[name]}
    assert moved == {"propositions/model", "model_shards"}


# the units keys of the other shipped corpora (the squad-open files' hashes; FactoidWiki's and
# the Wikipedia dump's hub ids with their settings), measured on commit 4dbbf4a too
CORPUS_UNITS_KEYS = {
    "squad-open": "75e5b9597cab",
    "factoid-wiki": "573cbb8c38c5",
    "wikipedia-hf": "cbd1a15667a0",
}


def test_units_keys_of_the_shipped_corpora_are_unchanged(squad_open) -> None:
    """The shipped corpora (squad-open among them: its files are hashed) keep their keys."""
    got = {
        corpus: units_key(corpus_spec(compose_config("evaluate", f"corpus={corpus}").corpus))
        for corpus in CORPUS_UNITS_KEYS
    }
    assert got == CORPUS_UNITS_KEYS

"""The tests' memo of Hydra's composition (`helpers.compose_memo`) gives what Hydra composes:
the same config, flags and `hydra` node as a composition with the memo empty, a copy the test
may change, and the same error again for a bad override."""

from __future__ import annotations

import os

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from helpers import compose_memo
from helpers.config import compose_config

pytestmark = pytest.mark.skipif(
    os.environ.get("DENSEX_TEST_COMPOSE_MEMO") == "0", reason="the memo is off"
)

CASES = [
    ("evaluate", ("experiment=demo",), True),
    ("evaluate", ("experiment=demo", "paths.cache_dir=/tmp/x", "topk=[1,5]"), True),
    ("evaluate", ("corpus=demo", "retriever=bm25", "granularity=sentence"), False),
    ("train", ("model=tiny", "trainer=cpu", "logger=csv", "paths.output_dir=/tmp/z"), True),
    ("index", ("stage=units", "corpus=demo", "corpus.passages=null"), False),
    (None, ("+retriever=minilm", "+paths=default", "retriever.batch_size=7"), False),
]


def _empty() -> None:
    for memo in (compose_memo._configs, compose_memo._defaults, compose_memo._merged):
        memo.clear()


def _same(a, b) -> None:
    assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b)
    assert OmegaConf.is_struct(a) == OmegaConf.is_struct(b)
    assert OmegaConf.is_readonly(a) == OmegaConf.is_readonly(b)
    if "hydra" in b:
        assert OmegaConf.is_readonly(a.hydra) == OmegaConf.is_readonly(b.hydra)


@pytest.mark.parametrize(("name", "overrides", "hydra"), CASES)
def test_a_memoised_composition_is_hydras(name, overrides, hydra, monkeypatch, tmp_path):
    _empty()
    fresh = compose_config(name, *overrides, hydra=hydra)
    # the defaults list of the groups alone memoised, then the values applied by Hydra
    _empty()
    groups = [o for o in overrides if "." not in o.split("=")[0]]
    compose_config(name, *groups, hydra=hydra)
    stats = dict(compose_memo.STATS)
    values_on_memo = compose_config(name, *overrides, hydra=hydra)
    if len(groups) < len(overrides):
        assert compose_memo.STATS["defaults_hit"] == stats.get("defaults_hit", 0) + 1
    _same(values_on_memo, fresh)
    # the whole composition again: a copy of the first, its runtime cwd the current one
    again = compose_config(name, *overrides, hydra=hydra)
    _same(again, fresh)
    if hydra:
        monkeypatch.chdir(tmp_path)
        assert compose_config(name, *overrides, hydra=True).hydra.runtime.cwd == str(tmp_path)


def test_a_copy_is_the_callers_own():
    first = compose_config("evaluate", "experiment=demo")
    first.retriever.batch_size = -3
    first.corpus.name = "changed"
    second = compose_config("evaluate", "experiment=demo")
    assert second.retriever.batch_size != -3 and second.corpus.name != "changed"
    with pytest.raises(Exception, match="some_new_key"):
        second.some_new_key = 1  # struct mode, as composed


@pytest.mark.parametrize(
    "bad", ["retriever=no_such_retriever", "no_such_key=1", "retriever.no_such_key=1"]
)
def test_a_bad_override_fails_every_time(bad):
    for _ in range(2):
        with pytest.raises(ConfigCompositionException):
            compose_config("evaluate", "corpus=demo", bad)


def test_what_does_not_pickle_is_kept_as_a_deep_copy():
    """The memo keeps a pickle of each config (a copy unpickled from it); an object that does
    not pickle is kept as a deep copy instead, each thaw a new copy of it."""
    frozen = compose_memo._freeze(OmegaConf.create({"a": [1, 2]}))
    assert isinstance(frozen, bytes)
    one, two = compose_memo._thaw(frozen), compose_memo._thaw(frozen)
    one.a.append(3)
    assert list(two.a) == [1, 2] and one is not two
    unpicklable = {"f": lambda: 1, "v": [1]}
    kept = compose_memo._freeze(unpicklable)
    assert not isinstance(kept, bytes)
    copied = compose_memo._thaw(kept)
    copied["v"].append(2)
    assert unpicklable["v"] == [1] and compose_memo._thaw(kept)["v"] == [1]

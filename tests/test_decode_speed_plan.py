"""`index.py stage=plan` budgets the proposition stage with the rate measured on this machine:
a generated propositions manifest's, else the speed benchmark's record."""

from __future__ import annotations

import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from densex.pipelines.plan.machine import SPEED_RECORD, measured_passages_per_second
from densex.pipelines.plan.run import plan
from densex.pipelines.plan.sizes import FACTOID_WIKI
from densex.pipelines.plan.tables import notes


def _manifest(cache: Path, key: str, passages: int, seconds: float, generated: int) -> None:
    d = cache / "propositions" / "model" / key
    d.mkdir(parents=True)
    shards = {"total": 4, "generated": generated}
    row = {"passages": passages, "generation_seconds": seconds, "shards": shards}
    (d / "manifest.json").write_text(json.dumps({**row, "settings": {"decoding": "greedy"}}))


def test_the_rate_comes_from_the_largest_generation_else_the_benchmark(tmp_path: Path) -> None:
    assert measured_passages_per_second(tmp_path) is None
    record = tmp_path.joinpath(*SPEED_RECORD)
    record.parent.mkdir(parents=True)
    best = {"path": "greedy, lookahead", "passages_per_s": 12.5}
    record.write_text(json.dumps({"best": best, "student": {"greedy": {"n": 36}}}))
    got = measured_passages_per_second(tmp_path)
    assert got["passages_per_second"] == 12.5 and "greedy, lookahead" in got["source"]
    _manifest(tmp_path, "a", 100, 50.0, 4)  # 2 passages/s over 100
    _manifest(tmp_path, "b", 400, 40.0, 2)  # half of 400 generated this run: 5 passages/s
    _manifest(tmp_path, "c", 900, 10.0, 0)  # all reused: no rate
    got = measured_passages_per_second(tmp_path)
    assert got["passages_per_second"] == 5.0 and got["passages"] == 200


def test_the_plan_times_factoid_wikis_propositions_at_the_measured_rate(
    repo_root: Path, tmp_path: Path
) -> None:
    _manifest(tmp_path, "a", 1000, 100.0, 4)  # 10 passages/s
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        cfg = compose("index", overrides=["retriever=minilm", f"paths.cache_dir={tmp_path}"])
    rows = plan(cfg)
    wiki = next(
        r for r in rows if r["corpus"] == "factoid-wiki" and r["granularity"] == "proposition"
    )
    assert wiki["propositionize_here_s"] == FACTOID_WIKI["passage"][0] / 10.0
    line = next(n for n in notes(rows) if n.startswith("propositionize here"))
    assert "10.00 passages/s" in line and "factoid-wiki 47.9 d" in line

"""What opening cached indexes costs: `densex.open_index` in a fresh process over a warm cache.

    flock /tmp/densex-cpu.lock .venv/bin/python benchmarks/open_cost.py --cache-dir DIR
    .venv/bin/python benchmarks/open_cost.py --cache-dir DIR corpus=demo dataset=demo

Runs (in this process) `open_index(<overrides>, granularity=passage,sentence,proposition)` on
a cache that already holds the units, embeddings and indexes (the first run of a cold cache
builds them: run it twice), then one `compare()` search. Prints the seconds to open, the bytes
this process read through read(2) while opening (`/proc/self/io` rchar: page-cache hits
included, so a sequential read of a units file shows whether or not it came from disk), the
units files' sizes beside them, and the RSS after opening and after the first search (query
encoders loaded), and how many distinct query encoder objects the opened cells hold.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

DEFAULT = ["corpus=squad-open", "dataset=squad-open", "retriever=minilm", "trainer=cpu"]
GRANULARITIES = "granularity=passage,sentence,proposition"


def rchar() -> int:
    """Bytes this process has read through read(2)/pread(2) so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return -1


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _mb(directory: Path) -> float:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--verify", default=None, help="cache.verify override (true/false)")
    ap.add_argument("overrides", nargs="*", help=f"default: {' '.join(DEFAULT)}")
    args = ap.parse_args()
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    from densex.pipelines.search.compose import compose_configs
    from densex.pipelines.search.index import open_configs

    overrides = [*(args.overrides or DEFAULT), GRANULARITIES, f"paths.cache_dir={args.cache_dir}"]
    if args.verify is not None:
        overrides.append(f"cache.verify={args.verify}")
    import torch  # noqa: F401  (imports are not what opening costs)

    t0 = time.perf_counter()
    cfgs = compose_configs(overrides)
    composed = time.perf_counter() - t0
    rss0, read0, t0 = rss_mb(), rchar(), time.perf_counter()
    ix = open_configs(cfgs)  # `densex.open_index` after composing
    seconds, read = time.perf_counter() - t0, rchar() - read0
    rss_open = rss_mb()
    ix.compare(["Which NFL team represented the AFC at Super Bowl 50?"], 5)
    rss_search = rss_mb()
    units = {g: Path(i.cell.units_path) for g, i in ix.items()}
    encoders = {id(getattr(i.cell.searcher, "retriever", None)) for i in ix.values()}
    print(f"compose {composed:.2f} s; open ({', '.join(ix)}): {seconds:.2f} s, "
          f"read {read / 1e6:.1f} MB")  # fmt: skip
    for g, p in units.items():
        info = getattr(ix[g].cell.searcher, "info", {})
        dirs = {k: Path(info[f"{k}_dir"]) for k in ("embeddings", "index") if f"{k}_dir" in info}
        sizes = ", ".join(f"{k} {_mb(d):.1f} MB" for k, d in dirs.items())
        print(f"  {g}: {len(ix[g]):,} units, units file {p.stat().st_size / 1e6:.1f} MB; {sizes}")
    print(f"  units directory (all files, re-hashed when cache.verify): {_mb(p.parent):.1f} MB")
    print(f"RSS: {rss0:.0f} MB before, {rss_open:.0f} MB opened, {rss_search:.0f} MB after a "
          f"search at each granularity; {len(encoders)} query encoder object(s)")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()

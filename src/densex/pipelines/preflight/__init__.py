"""Preflight: every entry's first seconds, before any heavy work.

`run.main(cfg, entry)`: logging set-up -> `run.preflight` (`inputs`: every input's first
records; `models`/`hub`: every model resolves; `sizes`: outputs against free space) -> the
entry's `run`. A multirun's `run.GridPreflight` callback checks the grid once (`grid`).
"""

from densex.pipelines.preflight.run import GridPreflight, main, preflight

__all__ = ["GridPreflight", "main", "preflight"]

"""The demo indexes opened from the session's demo sweep (`demo_sweep`, tests/conftest.py),
shared by the search API / service / page tests."""

from __future__ import annotations

import pytest

from helpers.demo_sweep import GRANULARITIES, demo_overrides


@pytest.fixture(scope="session")
def demo_index(demo_sweep):
    """The three demo granularities opened by the Python API from the sweep's cache."""
    import densex

    _, cache = demo_sweep
    return densex.open_index(*demo_overrides(cache), "granularity=" + ",".join(GRANULARITIES))

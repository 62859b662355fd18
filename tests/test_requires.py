"""The test suite's own requirements: under CI=true a missing input fails, naming it."""

from __future__ import annotations

import pytest

from helpers.requires import ci_missing, missing, require_module


def test_ci_lists_missing_data_and_modules(tmp_path, squad_open):
    lacking = ci_missing(tmp_path, {"no_such_module_x": "pip install x", "json": "stdlib"})
    assert lacking == [
        f"shared data: {tmp_path}/squad-open/passages.jsonl not found (a checkout beside"
        " ../shared, or DENSEX_DATA_DIR=/path/to/data)",
        "module 'no_such_module_x' (pip install x)",
    ]
    assert ci_missing(squad_open.parent, {"json": "stdlib"}) == []


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_skips_or_fails_under_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="no_such_module_x"):
        require_module("no_such_module_x", "x>=1")
    with pytest.raises(outcome, match="the data"):
        missing("the data is not here")
    assert require_module("json", "stdlib").dumps([]) == "[]"

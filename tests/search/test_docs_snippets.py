"""Every Python snippet of the pages runs against the demo cache: each ```python block and each
`python -c CODE` of README.md and docs/*.md (read as bash reads them: tests/helpers/docs.py),
in this process, with `DENSEX_CACHE_DIR` the cache of the test run's demo sweep (what
`make demo` fills), as a reader runs it after `make demo`; it must build nothing there (a
snippet that opens another corpus's indexes would build them: the pages promise none does)."""

from __future__ import annotations

import contextlib
import io

import pytest

from helpers.docs import python_snippets

SNIPPETS = python_snippets()


def test_the_pages_have_snippets() -> None:
    assert len(SNIPPETS) >= 4, SNIPPETS


@pytest.mark.parametrize("where,code", SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_documented_python_snippet_runs_on_the_demo_cache(
    where: str, code: str, demo_sweep, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cache = demo_sweep
    monkeypatch.setenv("DENSEX_CACHE_DIR", str(cache))
    monkeypatch.chdir(tmp_path)  # a relative path a snippet writes to lands here
    built = sorted(p.relative_to(cache) for p in cache.glob("*/*/*"))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, where, "exec"), {"__name__": "__main__"})  # noqa: S102
    except Exception as e:  # noqa: BLE001  (the failure names the page and line)
        pytest.fail(f"{where}: the snippet raised {type(e).__name__}: {e}\n{code}"[:3000],
                    pytrace=False)  # fmt: skip
    assert sorted(p.relative_to(cache) for p in cache.glob("*/*/*")) == built, (
        f"{where}: the snippet built something in the demo cache"
    )

"""The result files of a real demo multirun (`evaluate.py -m experiment=demo`, the session's
`demo_sweep`: MiniLM, three granularities, the first 60 demo questions): Table 2 shows every
configured cut-off with R@1 first and significance markers under the one stated decision rule,
the cell folders say their overrides, and `densex.open_index` on the built cache is silent."""

from __future__ import annotations

import csv
import subprocess
import sys

from helpers.env import subprocess_env

GRANULARITIES = ("passage", "sentence", "proposition")


def test_table2_shows_r_at_1_first_with_markers(demo_sweep):
    sweep, _ = demo_sweep
    md = (sweep / "table2.md").read_text(encoding="utf-8")
    header = next(line for line in md.splitlines() if line.startswith("| Retriever"))
    assert header == "| Retriever | Granularity | demo R@1 | demo R@5 | demo R@20 |"
    rows = {line.split("|")[2].strip(): line.split("|") for line in md.splitlines()[:12]
            if line.startswith("| ")}  # fmt: skip
    r1 = {g: rows[g][3].strip() for g in (*GRANULARITIES, "Δ prop − psg")}
    # propositions and sentences beat passages at R@1 (the randomization test decides)
    assert r1["proposition"].endswith("†") and r1["sentence"].endswith("†"), r1
    assert r1["Δ prop − psg"].startswith("+") and r1["Δ prop − psg"].endswith("*"), r1
    assert md.count("Decision rule: ") == 1 and "the paired randomization test" in md
    with open(sweep / "significance.csv", encoding="utf-8") as f:
        sig = list(csv.DictReader(f))
    tested = {(r["a"], r["b"], r["metric"]) for r in sig}
    assert {("proposition", "passage", m) for m in ("R@1", "R@5", "R@20")} <= tested
    assert all(r["retriever"] == "MiniLM" for r in sig)


def test_cell_folders_say_their_overrides(demo_sweep):
    sweep, _ = demo_sweep
    cells = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert cells == [f"{i}_granularity={g},limit_questions=60" for i, g in enumerate(GRANULARITIES)]


def test_open_index_on_a_built_cache_prints_nothing(demo_sweep):
    """The Python API logs at WARNING unless asked: no faiss loader lines, no preflight or
    units lines, no weight-loading report; `verbose=True` brings the densex lines back, once.
    Two fresh interpreters: the quiet one alone, then the standard way (the level the
    application set) followed by `verbose=True` after the application reset that level."""
    _, cache = demo_sweep
    overrides = ["corpus=demo", "dataset=demo", "retriever=minilm", "trainer=cpu",
                 f"paths.cache_dir={cache}", "limit_questions=60",
                 "granularity=" + ",".join(GRANULARITIES)]  # fmt: skip
    quiet = f"import densex; ix = densex.open_index(*{overrides!r}); ix.compare(['Who?'], k=2)"
    proc = subprocess.run([sys.executable, "-c", quiet], env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout + proc.stderr == ""
    loud = quiet.replace(")", ", verbose=True)", 1)
    # the standard way: the `densex` logger's level, set by the application; then that level
    # reset (NOTSET: densex's choice again) and `verbose=True`, after a marker line
    marker = "=== verbose ==="
    asked = (
        "import logging, sys; logging.getLogger('densex').setLevel(logging.INFO); "
        + quiet
        + f"; logging.getLogger('densex').setLevel(logging.NOTSET); print({marker!r}, "
        + "file=sys.stderr, flush=True); "
        + loud.removeprefix("import densex; ")
    )
    proc = subprocess.run([sys.executable, "-c", asked], env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, sep, after = proc.stderr.partition(marker + "\n")
    assert sep, proc.stderr[-3000:]
    assert len([ln for ln in before.splitlines() if "opened minilm/" in ln]) == 3
    assert "faiss" not in before.lower()  # third-party loader lines stay silent
    opened = [line for line in after.splitlines() if "opened minilm/" in line]
    assert len(opened) == 3, proc.stderr[-3000:]  # one line per granularity, each once

"""The result files of a real demo multirun (`evaluate.py -m experiment=demo`, the session's
`demo_sweep`: MiniLM, three granularities, the first 60 demo questions): Table 2 shows every
configured cut-off with R@1 first and significance markers under the one stated decision rule,
the cell folders say their overrides, and `densex.open_index` on the built cache is silent."""

from __future__ import annotations

import csv
import subprocess
import sys

from helpers.demo_sweep import GRANULARITIES, N_QUESTIONS, demo_overrides
from helpers.env import subprocess_env


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
    assert cells == [
        f"{i}_granularity={g},limit_questions={N_QUESTIONS}" for i, g in enumerate(GRANULARITIES)
    ]


# `python -c FORK_TWO OUT1 ERR1 CODE1 OUT2 ERR2 CODE2`: each CODE in an interpreter of its own,
# one after the other, with its stdout and stderr in the files OUT and ERR, and their exit
# statuses printed. The two are forked from this one after it imported torch, transformers,
# sentence-transformers and BERT's modeling (what each would import first, about 6 s of CPU
# each, and nothing densex or faiss, which each imports itself): fresh processes as far as
# densex's logging goes. What those imports printed would be on this process's stderr.
FORK_TWO = """
import os, sys
import torch, transformers, sentence_transformers, transformers.models.bert.modeling_bert
def child(out, err, code):
    fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for p in (out, err)]
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    exec(compile(code, "-c", "exec"), {"__name__": "__main__"})
    raise SystemExit(0)  # the interpreter's own exit (atexit, flush), not the loop below
statuses = []
for out, err, code in zip(*[iter(sys.argv[1:])] * 3):
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(out, err, code)
    statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(*statuses)
"""


def test_open_index_on_a_built_cache_prints_nothing(demo_sweep, tmp_path):
    """The Python API logs at WARNING unless asked: no faiss loader lines, no preflight or
    units lines, no weight-loading report; `verbose=True` brings the densex lines back, once.
    Opening and searching the built cache never imports Lightning (only encoding needs it).
    Two fresh interpreters (`FORK_TWO`): the quiet one alone, then the standard way (the level
    the application set) followed by `verbose=True` after the application reset that level."""
    _, cache = demo_sweep
    overrides = [*demo_overrides(cache), "granularity=" + ",".join(GRANULARITIES)]
    quiet = f"import densex; ix = densex.open_index(*{overrides!r}); ix.compare(['Who?'], k=2)"
    loud = quiet.replace(")", ", verbose=True)", 1)
    # searching a built cache never imports Lightning (only encoding does: seconds of import)
    unlit = "; import sys; assert 'pytorch_lightning' not in sys.modules, 'Lightning imported'"
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
    files = {name: tmp_path / name for name in ("quiet.out", "quiet.err", "asked.out", "asked.err")}
    argv = [str(files["quiet.out"]), str(files["quiet.err"]), quiet + unlit,
            str(files["asked.out"]), str(files["asked.err"]), asked]  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", FORK_TWO, *argv], env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    out = {name: path.read_text() for name, path in files.items()}
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    assert proc.stdout.split() == ["0", "0"], (proc.stdout, out["quiet.err"][-3000:],
                                               out["asked.err"][-3000:])  # fmt: skip
    assert out["quiet.out"] + out["quiet.err"] == ""
    before, sep, after = out["asked.err"].partition(marker + "\n")
    assert sep, out["asked.err"][-3000:]
    assert len([ln for ln in before.splitlines() if "opened minilm/" in ln]) == 3
    assert "faiss" not in before.lower()  # third-party loader lines stay silent
    opened = [line for line in after.splitlines() if "opened minilm/" in line]
    assert len(opened) == 3, out["asked.err"][-3000:]  # one line per granularity, each once

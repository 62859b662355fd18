"""The README's cluster steps on a real SLURM: `scripts/slurm_local.sh up` (two node names, n1
and n2, on this host), then `make test-slurm` (marker `slurm`; deselected by `make test`).

The commands are the README's "Running the paper's grid on a cluster" steps with the demo corpus
for FactoidWiki and the CPU partition for `partition=gpu` (`SLURM_CPU`); each runs the real entry
script, whose jobs go through sbatch/srun/slurmd. References are the same commands run locally.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from densex.utils.io import read_json, read_jsonl
from helpers.env import REPO, subprocess_env

pytestmark = pytest.mark.slurm

SLURM_DIR = Path(os.environ.get("DENSEX_SLURM_DIR", "/tmp/densex-slurm"))
# the README's `hydra.launcher.partition=gpu`, on this cluster's CPU partition: no GPU, one CPU
# per task, no memory request (64 GB would exceed the node), 20-minute limit
SLURM_CPU = (
    "hydra.launcher.partition=cpu",
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=null",
    "hydra.launcher.timeout_min=20",
)
# the demo corpus for $FW; shards of 32 units (15 for the demo's 472 propositions), so that
# resuming and splitting over ranks have something to split
DEMO = ("corpus=demo", "retriever=minilm", "trainer=cpu", "cache.embedding_shard_size=32")


def _run(args: list[str], log: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run an entry script (`index.py ...`) from the repo root, its output in `log`."""
    with open(log, "w") as out:
        proc = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=subprocess_env(), stdout=out,
            stderr=subprocess.STDOUT, timeout=timeout, check=False,
        )  # fmt: skip
    return proc


def _ok(args: list[str], log: Path, timeout: int = 900) -> str:
    proc = _run(args, log, timeout)
    text = log.read_text()
    assert proc.returncode == 0, f"{' '.join(args)} failed ({log}):\n{text[-4000:]}"
    return text


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout


def _job_ids(sweep_dir: Path) -> list[str]:
    """The SLURM job ids of a submitit sweep (`.submitit/<job id>/`)."""
    return sorted(p.name for p in (sweep_dir / ".submitit").iterdir() if p.is_dir())


def _sacct(job: str) -> str:
    fmt = "JobID,JobName%12,NNodes,NTasks,NodeList,State,Elapsed"
    return _sh("sacct", "-D", "-j", job, f"--format={fmt}")


def _sacct_done(job: str, timeout: float = 60) -> str:
    """sacct's lines for `job` once slurmdbd has every step's end (it lags the scheduler)."""
    deadline = time.monotonic() + timeout
    while True:
        text = _sacct(job)
        if ("RUNNING" not in text and "COMPLETED" in text) or time.monotonic() > deadline:
            return text
        time.sleep(2)


def _files(emb_dir: Path) -> dict[str, bytes]:
    """The shard files of an embeddings dir (vectors, ids, truncated-unit lists)."""
    return {p.name: p.read_bytes() for p in sorted(emb_dir.glob("*-*.*")) if p.suffix != ".tmp"}


def _emb_dir(cache: Path, count: int = 472) -> Path:
    """The complete embeddings dir of the demo's `count` (472) propositions in a cache: the build
    locks beside it (`.<key>.lock`) and the sweep's passage and sentence dirs are skipped."""
    (found,) = (
        d for d in (cache / "embeddings" / "minilm").iterdir()
        if d.is_dir() and (d / "manifest.json").exists()
        and read_json(d / "manifest.json")["count"] == count
    )  # fmt: skip
    return found


@pytest.fixture(scope="module")
def slurm() -> None:
    """The cluster `scripts/slurm_local.sh up` started (SLURM_CONF), both nodes answering."""
    conf = Path(os.environ.get("SLURM_CONF", SLURM_DIR / "slurm.conf"))
    if shutil.which("sbatch") is None or not conf.exists():
        reason = f"no SLURM cluster ({conf} missing): run scripts/slurm_local.sh up"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    os.environ["SLURM_CONF"] = str(conf)
    nodes = _sh("sinfo", "-h", "-N", "-o", "%N %t").split("\n")
    states = dict(line.split() for line in nodes if line.strip())
    assert set(states) == {"n1", "n2"} and set(states.values()) <= {"idle", "mix", "alloc"}, states
    print(_sh("sinfo", "-N", "-o", "%N %P %t %c %m"))


@pytest.fixture(scope="module")
def caches(slurm, tmp_path_factory) -> dict[str, Path]:
    """Step 1, units once (locally, as the README runs it), copied into a second cache for the
    local reference runs: `slurm` is the cluster's cache, `local` the reference's."""
    root = tmp_path_factory.mktemp("slurm")
    paths = {"root": root, "slurm": root / "cache-slurm", "local": root / "cache-local"}
    _ok(["index.py", *DEMO, "stage=units", f"paths.cache_dir={paths['slurm']}",
         f"hydra.run.dir={root / 'units'}"], root / "units.log")  # fmt: skip
    shutil.copytree(paths["slurm"] / "units", paths["local"] / "units")
    return paths


@pytest.fixture(scope="module")
def ddp_embed(caches) -> dict[str, object]:
    """Step 2: `index.py -m hydra/launcher=slurm_ddp ... stage=embed trainer.num_nodes=2
    trainer.devices=1 trainer.strategy=ddp`, and the same encoding by one local process."""
    root = caches["root"]
    sweep = root / "embed-sweep"
    t0 = time.perf_counter()
    log = _ok(["index.py", "-m", "hydra/launcher=slurm_ddp", *SLURM_CPU, *DEMO, "stage=embed",
               "trainer.strategy=ddp", "trainer.num_nodes=2", "trainer.devices=1",
               "granularity=proposition", f"paths.cache_dir={caches['slurm']}",
               f"hydra.sweep.dir={sweep}"], root / "embed-slurm.log")  # fmt: skip
    seconds = time.perf_counter() - t0
    _ok(["index.py", *DEMO, "stage=embed", "granularity=proposition",
         f"paths.cache_dir={caches['local']}", f"hydra.run.dir={root / 'embed-local'}"],
        root / "embed-local.log")  # fmt: skip
    (job,) = _job_ids(sweep)
    return {"sweep": sweep, "job": job, "log": log, "seconds": seconds}


def test_slurm_ddp_encoding_equals_one_process(caches, ddp_embed) -> None:
    """2 SLURM tasks on n1 and n2, each a Lightning rank (SLURM_PROCID = global rank), write the
    same embedding shards, byte for byte, as one local process."""
    job, sweep = ddp_embed["job"], ddp_embed["sweep"]
    acct = _sacct_done(job)
    print(f"slurm_ddp encoding: {ddp_embed['seconds']:.0f} s\n{acct}")
    step = next(line.split() for line in acct.splitlines() if line.startswith(f"{job}.0 "))
    assert step[2:5] == ["2", "2", "n[1-2]"], acct  # NNodes, NTasks, NodeList
    threads = {}
    for task in (0, 1):
        out = (sweep / ".submitit" / job / f"{job}_{task}_log.out").read_text()
        assert f"GLOBAL_RANK: {task}, MEMBER: {task + 1}/2" in out
        threads[f"rank {task}"] = re.findall(r"; (\d+) torch threads\)", out)
    threads["1 process"] = re.findall(
        r"; (\d+) torch threads\)", (caches["root"] / "embed-local.log").read_text()
    )
    print(f"torch threads: {threads}")
    # bitwise equality needs the same kernels: one thread count everywhere (OMP_NUM_THREADS=1)
    assert all(threads.values()) and len({t for ts in threads.values() for t in ts}) == 1, threads
    two, one = _emb_dir(caches["slurm"]), _emb_dir(caches["local"])
    assert two.name == one.name  # the same content key
    files = _files(two)
    assert len(files) == 3 * 15 and files == _files(one)
    manifest = read_json(two / "manifest.json")
    assert manifest["processes"] == 2 and manifest["count"] == 472
    assert read_json(one / "manifest.json")["processes"] == 1


def test_index_stage_under_slurm(caches, ddp_embed) -> None:
    """Step 3: `index.py -m hydra/launcher=slurm ... stage=index`, one task, builds the index
    from the cached embeddings (nothing re-encoded)."""
    sweep = caches["root"] / "index-sweep"
    _ok(["index.py", "-m", "hydra/launcher=slurm", *SLURM_CPU, *DEMO, "stage=index",
         "index=flat", "granularity=proposition", f"paths.cache_dir={caches['slurm']}",
         f"hydra.sweep.dir={sweep}"], caches["root"] / "index-slurm.log")  # fmt: skip
    (job,) = _job_ids(sweep)
    acct = _sacct_done(job)
    print(acct)
    step = next(line.split() for line in acct.splitlines() if line.startswith(f"{job}.0 "))
    assert step[2:4] == ["1", "1"] and step[5] == "COMPLETED", acct
    log = (sweep / "0" / "index.log").read_text()
    assert "index ready: 472 proposition units (minilm)" in log
    # the embeddings of step 2 were reused, the index built in this job
    assert "minilm searcher over 472 units (cached embeddings, new index" in log
    assert list((caches["slurm"] / "index" / "minilm").rglob("manifest.json"))


@pytest.fixture(scope="module")
def sweeps(caches, ddp_embed) -> dict[str, Path]:
    """Step 4 on SLURM (`evaluate.py -m experiment=demo hydra/launcher=slurm ...`: one job per
    granularity) and the same sweep run locally."""
    root, out = caches["root"], {}
    for where, launcher in (("slurm", ["hydra/launcher=slurm", *SLURM_CPU]), ("local", [])):
        out[where] = root / f"sweep-{where}"
        t0 = time.perf_counter()
        _ok(["evaluate.py", "-m", "experiment=demo", *launcher, *DEMO,
             f"paths.cache_dir={caches[where]}", f"hydra.sweep.dir={out[where]}"],
            root / f"sweep-{where}.log")  # fmt: skip
        print(f"{where} sweep: {time.perf_counter() - t0:.0f} s")
    return out


def test_slurm_sweep_one_job_per_cell_and_the_local_tables(sweeps) -> None:
    """One SLURM job per cell (an array of 3); the callback writes table2.md and
    significance.csv once, after the last cell, equal to the local sweep's."""
    slurm, local = sweeps["slurm"], sweeps["local"]
    (array,) = {j.split("_")[0] for j in _job_ids(slurm)}
    acct = _sacct_done(array)
    print(acct)
    cells = [ln.split() for ln in acct.splitlines() if re.match(rf"{array}_\d+ ", ln)]
    assert sorted(c[0] for c in cells) == [f"{array}_{i}" for i in range(3)], acct
    assert all(c[-2] == "COMPLETED" for c in cells), acct  # State (array lines: no NTasks)
    results = sorted(slurm.glob("*/results.jsonl"))
    assert len(results) == 3
    last_cell = max(p.stat().st_mtime for p in results)
    for name in ("table2.md", "significance.csv"):
        assert (slurm / name).stat().st_mtime >= last_cell
        assert (slurm / name).read_text() == (local / name).read_text(), name
    assert "proposition" in (slurm / "table2.md").read_text()
    assert not list(slurm.glob("*/table2.md"))  # the sweep's table only, no per-cell copies


def test_failed_cell_names_job_overrides_log_and_the_tables_name_it(caches, sweeps) -> None:
    """A cell that fails inside its SLURM job fails the sweep with the job id, the cell's
    overrides and its log; table2.md holds the cell that succeeded and names the missing one."""
    root = caches["root"]
    good = REPO / "data" / "demo" / "passages.jsonl"
    lines = good.read_text().splitlines()
    bad = root / "passages-bad.jsonl"
    bad.write_text("\n".join([*lines[:29], '{"id": "broken", "text": ', *lines[30:]]) + "\n")
    sweep = root / "sweep-failing"
    proc = _run(["evaluate.py", "-m", "hydra/launcher=slurm", *SLURM_CPU, *DEMO,
                 "dataset=demo", "topk=[1,5,20]", "hydra.callbacks.aggregate.ks=[1,5,20]",
                 f"corpus.passages={good},{bad}", "granularity=passage",
                 f"paths.cache_dir={caches['slurm']}", f"hydra.sweep.dir={sweep}"],
                root / "sweep-failing.log")  # fmt: skip
    text = (root / "sweep-failing.log").read_text()
    assert proc.returncode != 0, text[-3000:]
    (failed,) = list(read_jsonl(sweep / "failed_cells.jsonl"))
    job, log = failed["slurm_job_id"], Path(failed["log"])
    assert failed["cell"] == 1 and f"corpus.passages={bad}" in failed["overrides"]
    assert re.fullmatch(r"\d+_1", job) and log == sweep / ".submitit" / job / f"{job}_0_log.err"
    line = f"cell #1 failed in SLURM job {job}: "
    assert line in text and f"corpus.passages={bad}" in text and f"log: {log}" in text
    # the entry's located line from the job's log, not submitit's "exited with code 2"
    assert failed["error"].startswith("error (") and f"{bad}:30: " in failed["error"]
    assert f"; {failed['error']}" in text
    assert "passages-bad.jsonl" in log.read_text()  # the cell's traceback is in its log
    table = (sweep / "table2.md").read_text()
    assert "**Missing: 1 cell(s) failed**" in table and f"SLURM job {job}" in table
    assert list(sweep.glob("0_*/results.jsonl")) and "| MiniLM | passage |" in table
    assert failed["error"] in table  # the located error under the table, too
    print(table.split("\n\n")[2:4], text[text.index(line) :][:400])


def _complete_shards(emb_dir: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every shard whose vectors and ids are both on disk."""
    out = {}
    for emb in emb_dir.glob("emb-*.npy"):
        ids = emb.with_name(emb.name.replace("emb-", "ids-").replace(".npy", ".json"))
        if ids.exists():
            out[emb.name] = (emb.stat().st_ino, emb.stat().st_mtime_ns)
    return out


def test_preempted_encoding_is_requeued_and_resumes(caches, ddp_embed) -> None:
    """SIGUSR2 (what SLURM sends `signal_delay_s` before the time limit or on preemption, as
    submitit asks) mid-encoding: submitit checkpoints and requeues the job, the rerun keeps the
    shards already written (same files, untouched) and ends with the uninterrupted run's bytes.
    Fails if resume is disabled (the first shards would be re-encoded: new files) or if the job
    is not requeued (the sweep would fail)."""
    root = caches["root"]
    cache = root / "cache-requeue"
    shutil.copytree(caches["slurm"] / "units", cache / "units")
    sweep = root / "requeue-sweep"
    args = ["index.py", "-m", "hydra/launcher=slurm", *SLURM_CPU, *DEMO, "stage=embed",
            "granularity=proposition", f"paths.cache_dir={cache}", f"hydra.sweep.dir={sweep}"]  # fmt: skip
    with open(root / "requeue.log", "w") as out:
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=subprocess_env(),
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline, before = time.monotonic() + 600, {}
        while not before and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            found = [d for d in (cache / "embeddings").glob("minilm/*") if d.is_dir()]  # no lock
            before = _complete_shards(found[0]) if found else {}
        assert before, "no shard was written"
        (job,) = _job_ids(sweep)
        _sh("scancel", "--signal=USR2", job)
        rc = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = (root / "requeue.log").read_text()
    assert rc == 0, text[-3000:]
    acct = _sacct_done(job)
    print(f"preempted after {len(before)} shards\n{acct}")
    assert "REQUEUED" in acct or "PREEMPTED" in acct, acct
    # submitit's own lines, in the job's logs (appended to by both runs)
    job_logs = "".join(p.read_text() for p in (sweep / ".submitit" / job).glob(f"{job}_0_log.*"))
    assert "this job is preempted" in job_logs  # the requeue itself: REQUEUED in sacct above
    emb_dir = _emb_dir(cache)
    after = _complete_shards(emb_dir)
    kept = {name: after[name] == before[name] for name in before}
    assert all(kept.values()), f"shards re-encoded after the requeue: {kept}"
    manifest = read_json(emb_dir / "manifest.json")
    assert manifest["resumed_shards"] >= len(before) and manifest["encoded_this_run"] < 472
    assert _files(emb_dir) == _files(caches["local"] / "embeddings" / "minilm" / emb_dir.name)

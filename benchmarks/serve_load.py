"""Loopback load test of the search service: N requests at concurrency C against `serve.py`.

    flock /tmp/densex-cpu.lock .venv/bin/python benchmarks/serve_load.py --cache-dir DIR
    .venv/bin/python benchmarks/serve_load.py --requests 2000 --concurrency 16 \
        --overrides corpus=squad-open granularity=proposition retriever=minilm

Starts `serve.py` (default: the squad-open proposition index with MiniLM; built first when the
cache has none), then sends `--requests` GET /search requests (`k=5`, squad-open questions in
order, cycling) from `--concurrency` connections, all to 127.0.0.1, bounded in count and time.
Prints errors, p50 / p99 latency, requests/s, the server's RSS (mean of the first vs the last
quarter of the run, sampled every 0.1 s from /proc) and, side by side in the same run, the
same service at concurrency 1 on `--baseline` requests: the throughput ratio is what
micro-batching gains. Exits 1 on any error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT = ["corpus=squad-open", "granularity=proposition", "retriever=minilm", "trainer=cpu"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(overrides: list[str], port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO / "src")}  # fmt: skip
    cmd = [sys.executable, str(REPO / "serve.py"), *overrides, f"serve.port={port}",
           f"hydra.run.dir={log.parent}"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 1800  # a first run builds the index (minutes)
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).raise_for_status()
            return proc
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                sys.exit(f"serve.py did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)


async def load(url: str, questions: list[str], n: int, concurrency: int, k: int) -> dict:
    """`n` requests from `concurrency` workers; latencies (s), errors, wall time."""
    latencies = np.zeros(n)
    errors: list[str] = []
    next_i = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker() -> None:
            nonlocal next_i
            while next_i < n:
                i, next_i = next_i, next_i + 1
                t0 = time.perf_counter()
                try:
                    r = await client.get(
                        "/search", params={"q": questions[i % len(questions)], "k": k}
                    )
                    if r.status_code != 200 or not r.json()["results"]:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                except httpx.HTTPError as e:
                    errors.append(repr(e))
                latencies[i] = time.perf_counter() - t0

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        stats = (await client.get("/healthz")).json()["batching"]
    return {"latencies": latencies, "errors": errors, "wall": wall, "batching": stats}


def sample_rss(pid: int, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    while not stop.is_set():
        out.append((time.perf_counter(), rss_mb(pid)))
        stop.wait(0.1)


def report(name: str, run: dict, n: int) -> float:
    lat = run["latencies"] * 1000
    rate = n / run["wall"]
    print(f"{name}: {n} requests, {len(run['errors'])} errors, p50 {np.percentile(lat, 50):.1f} ms, "
          f"p99 {np.percentile(lat, 99):.1f} ms, {rate:.1f} req/s ({run['wall']:.1f} s)")  # fmt: skip
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--baseline", type=int, default=200, help="requests at concurrency 1 (0: none)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--cache-dir", default=None, help="paths.cache_dir (default: the config's)")
    ap.add_argument("--overrides", nargs="*", default=DEFAULT)
    ap.add_argument(
        "--data", default=os.environ.get("DENSEX_DATA_DIR", str(REPO.parent / "shared" / "data"))
    )
    args = ap.parse_args()
    overrides = list(args.overrides) + (
        [f"paths.cache_dir={args.cache_dir}"] if args.cache_dir else []
    )
    with open(Path(args.data) / "squad-open" / "questions.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for line in f if line.strip()]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"densex-serve-load-{os.getpid()}" / "serve.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = start_server(overrides, port, log)
    url = f"http://127.0.0.1:{port}"
    print(f"serve.py {' '.join(overrides)}: up in {time.perf_counter() - t0:.1f} s, pid {proc.pid}")
    try:
        measure(url, proc.pid, questions, args)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure(url: str, pid: int, questions: list[str], args: argparse.Namespace) -> None:
    """The concurrent run (RSS sampled beside it), then the concurrency-1 baseline."""
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(pid, stop, samples), daemon=True)
    start = time.perf_counter()
    sampler.start()
    run = asyncio.run(load(url, questions, args.requests, args.concurrency, args.k))
    stop.set()
    sampler.join()
    rate = report(f"concurrency {args.concurrency}", run, args.requests)
    b = run["batching"]
    print(f"  micro-batching: {b['queries']} queries in {b['batches']} encoder calls "
          f"(mean {b['queries'] / max(1, b['batches']):.1f}, largest {b['largest_batch']})")  # fmt: skip
    t = np.array([s[0] - start for s in samples])
    mb = np.array([s[1] for s in samples])
    first, last = mb[t <= t.max() / 4], mb[t >= 3 * t.max() / 4]
    print(f"  server RSS: first quarter {first.mean():.0f} MB, last quarter {last.mean():.0f} MB "
          f"(ratio {last.mean() / first.mean():.3f}, max {mb.max():.0f} MB, {len(mb)} samples)")  # fmt: skip
    for e in run["errors"][:5]:
        print("  error:", e)
    if args.baseline:
        base = asyncio.run(load(url, questions, args.baseline, 1, args.k))
        base_rate = report("concurrency 1", base, args.baseline)
        print(f"  throughput ratio (concurrency {args.concurrency} / 1): {rate / base_rate:.2f}x")
        run["errors"] += base["errors"]
    if run["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()

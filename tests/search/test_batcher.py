"""`MicroBatcher`: concurrent requests share one search call per (granularity, k), each gets
its own results back, and a failing search fails only the requests of its call."""

from __future__ import annotations

import asyncio
import threading

import pytest

from densex.pipelines.serve.batcher import MicroBatcher


def _echo_search(calls: list):
    def search(granularity, queries, k):
        calls.append((granularity, list(queries), k, threading.current_thread().name))
        if "boom" in queries:
            raise RuntimeError("index failed")
        return [f"{granularity}:{q}:{k}" for q in queries]

    return search


def test_concurrent_requests_are_batched_and_answered_in_order():
    calls: list = []
    batcher = MicroBatcher(_echo_search(calls), max_queries=64, max_wait_s=0.05)

    async def main():
        reqs = [batcher.submit("proposition", [f"q{i}", f"r{i}"], 5) for i in range(10)]
        reqs += [batcher.submit("passage", ["p"], 5), batcher.submit("proposition", ["x"], 3)]
        return await asyncio.gather(*reqs)

    out = asyncio.run(main())
    assert out[:10] == [[f"proposition:q{i}:5", f"proposition:r{i}:5"] for i in range(10)]
    assert out[10:] == [["passage:p:5"], ["proposition:x:3"]]
    assert sorted((g, len(q), k) for g, q, k, _ in calls) == [
        ("passage", 1, 5), ("proposition", 1, 3), ("proposition", 20, 5)]  # fmt: skip
    assert {t for *_, t in calls} == {calls[0][3]} and calls[0][3].startswith("densex-search")
    assert batcher.stats.batches == 3 and batcher.stats.queries == 22
    assert batcher.stats.largest_batch == 20
    batcher.close()


def test_a_batch_is_capped_and_a_failure_stays_in_its_group():
    calls: list = []
    batcher = MicroBatcher(_echo_search(calls), max_queries=4, max_wait_s=0.05)

    async def main():
        good = [batcher.submit("s", [f"q{i}"], 1) for i in range(6)]
        bad = batcher.submit("s", ["boom"], 2)
        results = await asyncio.gather(*good, bad, return_exceptions=True)
        after = await batcher.submit("s", ["again"], 1)  # the batcher still serves
        return results, after

    results, after = asyncio.run(main())
    assert results[:6] == [[f"s:q{i}:1"] for i in range(6)]
    assert isinstance(results[6], RuntimeError) and after == ["s:again:1"]
    assert max(len(q) for _, q, _, _ in calls) <= 4
    batcher.close()


@pytest.mark.parametrize("n", [1, 3])
def test_a_lone_request_waits_at_most_max_wait(n):
    batcher = MicroBatcher(_echo_search([]), max_queries=64, max_wait_s=0.01)

    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await batcher.submit("s", ["q"] * n, 1)
        return loop.time() - t0

    assert asyncio.run(main()) < 1.0
    batcher.close()

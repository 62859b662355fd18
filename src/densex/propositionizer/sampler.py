"""A length-grouped, rank-sharding training sampler (whole batches per rank)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import DistributedSampler

__all__ = ["LengthGroupedSampler"]


class LengthGroupedSampler(DistributedSampler):
    """Shuffled indices in which neighbours have similar lengths, so padded batches waste little;
    with `num_replicas > 1`, this rank's share of whole batches.

    As in Hugging Face's sampler: shuffle (seed + epoch), cut into mega-batches of
    `mega_batches * batch_size * num_replicas` items, sort each by length (longest first), cut
    into batches of `batch_size`. Ranks take whole batches in turn, so each rank's batches are
    as well grouped as a single process's; the items left over after the last round of full
    batches are split evenly into one final (smaller) batch per rank. Every rank yields the
    same number of batches (`ceil(len(self) / batch_size)`), ranks are disjoint and together
    cover every index; only when fewer items than ranks are left over are a few repeated.

    A `DistributedSampler` subclass so that Lightning never wraps it in its own (shuffling)
    distributed sampler; `set_epoch` reshuffles.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int = 0,
        mega_batches: int = 50,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.lengths = list(lengths)
        super().__init__(
            self.lengths, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed
        )
        self.batch_size = batch_size
        self.mega = max(1, mega_batches) * batch_size * num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _order(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(len(self.lengths), generator=g).tolist()
        order: list[int] = []
        for start in range(0, len(perm), self.mega):
            order += sorted(perm[start : start + self.mega], key=lambda i: -self.lengths[i])
        return order

    def _split(self, n: int) -> tuple[int, int]:
        """(full batches per rank, items left over for the final round)."""
        rounds = n // (self.batch_size * self.num_replicas)
        return rounds, n - rounds * self.batch_size * self.num_replicas

    def __len__(self) -> int:
        rounds, tail = self._split(len(self.lengths))
        if tail == 0:
            return rounds * self.batch_size
        tail = max(tail, self.num_replicas)
        share = tail // self.num_replicas + (self.rank < tail % self.num_replicas)
        return rounds * self.batch_size + share

    def __iter__(self) -> Iterator[int]:
        order = self._order()
        if self.num_replicas == 1:
            yield from order
            return
        bs, r, world = self.batch_size, self.rank, self.num_replicas
        rounds, tail = self._split(len(order))
        for b in range(rounds):
            start = (b * world + r) * bs
            yield from order[start : start + bs]
        if tail:
            rest = order[rounds * bs * world :]
            rest += order[: max(0, world - len(rest))]  # fewer items than ranks: repeat a few
            q, extra = divmod(len(rest), world)
            start = r * q + min(r, extra)
            yield from rest[start : start + q + (r < extra)]

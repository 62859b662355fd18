"""What an offline W&B run logged, read back from its `run-<id>.wandb` transaction log.

wandb >= 0.18 writes the log from its Go core and ships no Python reader. The file is W&B's
7-byte header (`:W&B`, a 2-byte magic, a version byte) followed by LevelDB's log format: 32 KiB
blocks of records, each a 7-byte header (crc32c, little-endian length, type: 1 full, 2 first,
3 middle, 4 last) and its bytes; a block's tail shorter than a header is zero padding. Each
complete record is a `wandb.proto.wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7


def records(path: Path) -> list[Any]:
    """Every `Record` of the transaction log `path`, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B transaction log (header {data[:7]!r})")
    out, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's zero padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0:  # zero-filled rest of the last block
            break
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def finished_records(path: Path, timeout_s: float = 60.0) -> list[Any]:
    """The records of a finished run's log. `run.finish()` can return before W&B's core
    process has written the log (seen: only the 7-byte header there), so this waits up to
    `timeout_s` for its closing `exit` record."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = records(path) if path.stat().st_size > HEADER else []
        if any(r.WhichOneof("record_type") == "exit" for r in got):
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: no exit record after {timeout_s} s ({len(got)} records)")
        time.sleep(0.1)


def logged(path: Path) -> dict[str, Any]:
    """`{"name", "history": [{key: value}, ...], "summary": {...}, "config": {...}}` of a
    finished run's log, values decoded from their JSON (media such as tables come as their W&B
    descriptors)."""

    def key(item: Any) -> str:
        return item.key or "/".join(item.nested_key)

    history, summary, config, name = [], {}, {}, None
    for r in finished_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":  # the run's start: its name and the config given to wandb.init
            name = r.run.display_name
            config.update({key(i): json.loads(i.value_json) for i in r.run.config.update})
        elif kind == "history":
            history.append({key(i): json.loads(i.value_json) for i in r.history.item})
        elif kind == "summary":
            summary.update({key(i): json.loads(i.value_json) for i in r.summary.update})
        elif kind == "config":
            config.update({key(i): json.loads(i.value_json) for i in r.config.update})
    return {"name": name, "history": history, "summary": summary, "config": config}

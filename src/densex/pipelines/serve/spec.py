"""The `serve` config group (`conf/serve/default.yaml`): the service's settings, typed."""

from __future__ import annotations

from dataclasses import dataclass

from densex.utils.config import check_choices

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


@dataclass
class ServeSpec:
    """Where the service listens, what it accepts, how it batches.

    `host` defaults to loopback: exposing the service is an explicit choice. A request with
    `k` outside 1..`max_k`, a query longer than `max_query_chars`, more than
    `max_request_queries` queries or a body over `max_body_bytes` is refused with a 4xx.
    Concurrent queries wait at most `batch_wait_ms` to share an encoder call of at most
    `batch_max_queries` queries. `sweep_dir`: a finished evaluate sweep for the sweep browser.
    `granularities`: set by `serve.py` from `granularity=a,b,c` (null: the one granularity).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    default_k: int = 5
    max_k: int = 100
    max_query_chars: int = 2000
    max_request_queries: int = 256
    max_body_bytes: int = 1_000_000
    batch_max_queries: int = 64
    batch_wait_ms: float = 2.0
    units_per_passage: int = 3
    sweep_dir: str | None = None
    granularities: list[str] | None = None
    log_level: str = "warning"

    def __post_init__(self) -> None:
        check_choices("serve", log_level=(self.log_level, LOG_LEVELS))
        for key in ("port", "default_k", "max_k", "max_query_chars", "max_request_queries",
                    "max_body_bytes", "batch_max_queries", "units_per_passage"):  # fmt: skip
            if int(getattr(self, key)) < (0 if key == "port" else 1):
                raise ValueError(f"serve.{key} must be >= 1, got {getattr(self, key)}")
        if not 1 <= self.default_k <= self.max_k:
            raise ValueError(f"serve.default_k must be in 1..serve.max_k, got {self.default_k}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"serve.batch_wait_ms must be >= 0, got {self.batch_wait_ms}")

"""Logging through rich, configured once."""

from __future__ import annotations

import logging
import os


def get_logger(name: str) -> logging.Logger:
    """A module logger; Hydra configures handlers in entry scripts, this covers library use."""
    logger = logging.getLogger(name)
    root = logging.getLogger()
    if not root.handlers:
        from rich.logging import RichHandler

        logging.basicConfig(
            level=logging.INFO, format="%(message)s", handlers=[RichHandler(show_path=False)]
        )
    return logger


# Third-party messages that cost a reader attention and say nothing about the run. They are
# dropped by `setup_logging` unless `verbose=true`.
QUIET_LOGGERS = {
    # "Loading faiss with AVX512 support." / "Could not load library with AVX512 support due
    # to: ModuleNotFoundError(...)": faiss trying its CPU builds in turn
    "faiss.loader": logging.WARNING,
    "faiss": logging.WARNING,
    "httpx": logging.WARNING,
}
QUIET_MESSAGES = (
    "💡 Tip:",  # Lightning's litlogger advertisement
    "was configured so validation will run",  # val_check_interval, also during predict
    "Trainer already configured with model summary callbacks",
    "TPU available:",
    "HPU available:",
    "LOCAL_RANK:",
)
QUIET_WARNINGS = (
    r".*treespec.*deprecated",  # Lightning's _pytree on torch >= 2.x
    r".*_register_pytree_node.*deprecated",
    r".*is smaller than the logging interval",
    r".*does not have many workers which may be a bottleneck",
    r".*pkg_resources is deprecated",
    r".*Consider setting `persistent_workers=True`",
    # shard claims feed predict from an IterableDataset with an upper-bound length (utils.locks)
    r".*Your `IterableDataset` has `__len__` defined",
    r".*Couldn't infer the batch indices fetched from your dataloader",
)


class _DropMessages(logging.Filter):
    def __init__(self, needles: tuple[str, ...]) -> None:
        super().__init__()
        self.needles = needles

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self.needles)


_QUIET_FILTER = _DropMessages(QUIET_MESSAGES)


def setup_logging(verbose: bool = False) -> None:
    """The one logging set-up of the entry points (after Hydra configured its handlers).

    Not verbose (the default): faiss's loader INFO lines, Lightning's tips and predict-time
    messages, known third-party deprecation warnings and Hugging Face download/loading bars
    are dropped. `verbose=true` restores everything, including DEBUG from densex.
    """
    import warnings

    root = logging.getLogger()
    if verbose:
        logging.getLogger("densex").setLevel(logging.DEBUG)
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
            logging.getLogger(name).removeFilter(_QUIET_FILTER)
        for handler in root.handlers:
            handler.removeFilter(_QUIET_FILTER)
        return
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    # Lightning logs through `<package>.utilities.rank_zero`; a filter on the handlers catches
    # records of every child logger (logger filters do not apply to children)
    for handler in root.handlers:
        if _QUIET_FILTER not in handler.filters:
            handler.addFilter(_QUIET_FILTER)
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        for h in logging.getLogger(name).handlers:
            if _QUIET_FILTER not in h.filters:
                h.addFilter(_QUIET_FILTER)
    for pattern in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"wandb(\..*)?")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"wandb(\..*)?")
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import transformers.utils.logging as tlog

        tlog.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass


def render(renderable: object, min_width: int = 60) -> str:
    """A rich renderable (e.g. a `Table`) as plain text at its natural width, for log lines:
    no ANSI escapes, and no wrapping at the 80 columns a log file or pipe would get."""
    import io

    from rich.console import Console
    from rich.measure import Measurement

    probe = Console(width=1000, file=io.StringIO(), color_system=None)
    width = Measurement.get(probe, probe.options, renderable).maximum
    console = Console(width=max(width, min_width), file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue().rstrip()


def interval_s() -> float:
    """Seconds between two progress log lines (`DENSEX_PROGRESS_S`, default 30): progress bars
    off a terminal (`utils.progress`) and lock waits (`utils.locks`)."""
    try:
        return max(0.0, float(os.environ.get("DENSEX_PROGRESS_S", "30")))
    except ValueError:
        return 30.0

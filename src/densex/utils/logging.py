"""Logging: the entries' set-up (`setup_logging`, after Hydra configured its handlers) and the
Python API's (`library_logging`: quiet unless asked). Importing densex configures nothing.

Every message is printed once: the entries log through Hydra's handlers on the root logger;
the API logs through the application's handlers when it has configured logging (the root
logger has handlers), else through one stderr handler on the `densex` logger.
"""

from __future__ import annotations

import logging
import os
import sys


def get_logger(name: str) -> logging.Logger:
    """A module logger (`logging.getLogger(name)`). It configures nothing: the entries' handlers
    come from Hydra, the API's from `library_logging` or the application."""
    return logging.getLogger(name)


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


# loggers whose records at or above the level are printed to the terminal by their caller
# itself: `pipelines.preflight.run.fail` prints the error to stderr as one line and exits, so
# its log record goes to the job's log file only (shown once). A record logged with
# `extra={"console": False}` is treated the same way.
PRINTED_BY_CALLER = {"densex.pipelines.preflight.run": logging.ERROR}


class _NotOnConsole(logging.Filter):
    """Drops, on a terminal handler, the records their caller prints itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "console", True) is False:
            return False
        level = PRINTED_BY_CALLER.get(record.name)
        return level is None or record.levelno < level


_CONSOLE_FILTER = _NotOnConsole()


def _console_once(root: logging.Logger) -> None:
    """`_NotOnConsole` on the root's terminal handlers (streams, not files)."""
    for h in root.handlers:
        terminal = isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
        if terminal and _CONSOLE_FILTER not in h.filters:
            h.addFilter(_CONSOLE_FILTER)


def setup_logging(verbose: bool = False) -> None:
    """The one logging set-up of the entry points (after Hydra configured its handlers).

    Not verbose (the default): faiss's loader INFO lines, Lightning's tips and predict-time
    messages, known third-party deprecation warnings and Hugging Face download/loading bars
    are dropped. `verbose=true` restores everything, including DEBUG from densex.
    """
    import warnings

    root = logging.getLogger()
    if not root.handlers:  # outside Hydra (a script, a worker process): INFO to stderr
        logging.basicConfig(
            level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
        )
    _console_once(root)
    pkg = logging.getLogger("densex")
    if pkg.level == getattr(pkg, _SET_BY_US, None):  # an API call set it: entries log INFO
        pkg.setLevel(logging.NOTSET)
        setattr(pkg, _SET_BY_US, None)
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
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import transformers.utils.logging as tlog

        tlog.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass


class _UnlessConfigured(logging.Filter):
    """Passes a record only while the root logger has no handler: once the application
    configures logging, the record reaches its handlers by propagation instead (printed once)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not logging.getLogger().handlers


_LIBRARY_HANDLER = logging.StreamHandler(sys.stderr)
_LIBRARY_HANDLER.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
_LIBRARY_HANDLER.addFilter(_UnlessConfigured())
_SET_BY_US = "_densex_level_set_by_library_logging"  # the level it set
# third-party loggers the API silences below WARNING unless verbose (Lightning's predict and
# its tips when an index is built, sentence-transformers' model loading)
LIBRARY_QUIET_LOGGERS = (
    *QUIET_LOGGERS,
    "pytorch_lightning",
    "lightning.pytorch",
    "lightning_fabric",
    "lightning",
    "sentence_transformers",
)


def library_logging(verbose: bool = False) -> None:
    """The logging of the Python API (`densex.open_index`, `DensexRetriever`, the service):

    - not verbose (the default): densex logs WARNING and above, unless the application set
      the `densex` logger's level itself (`logging.getLogger("densex").setLevel(logging.INFO)`,
      the standard way, is respected); faiss's loader lines, Lightning's info lines,
      sentence-transformers' and transformers' loading messages (the weight-loading report)
      and the Hugging Face progress bars are silenced;
    - verbose: densex at INFO and every library's lines and bars.

    Messages are printed once: through the application's handlers when it configured logging,
    else through one stderr handler on the `densex` logger (`_UnlessConfigured`).
    """
    pkg = logging.getLogger("densex")
    if _LIBRARY_HANDLER not in pkg.handlers:
        pkg.addHandler(_LIBRARY_HANDLER)
    # the level is ours to choose unless the application set one (then it is kept)
    if verbose or pkg.level in (logging.NOTSET, getattr(pkg, _SET_BY_US, None)):
        pkg.setLevel(logging.INFO if verbose else logging.WARNING)
        setattr(pkg, _SET_BY_US, pkg.level)
    for name in LIBRARY_QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)
    _hf_quiet(not verbose)


def _hf_quiet(quiet: bool) -> None:
    """Hugging Face's loading reports and progress bars off (`quiet`) or back on."""
    try:
        import huggingface_hub.utils as hub
        import transformers.utils.logging as tlog
    except ImportError:  # pragma: no cover - both are dependencies
        return
    if quiet:
        tlog.set_verbosity_error()
        tlog.disable_progress_bar()
        hub.disable_progress_bars()
    else:
        tlog.set_verbosity_warning()
        tlog.enable_progress_bar()
        hub.enable_progress_bars()


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

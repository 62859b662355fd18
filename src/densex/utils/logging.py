"""Logging through rich, configured once."""

from __future__ import annotations

import logging


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

"""Entry scripts run in this process, as the shell would run them (argv, Hydra, preflight, the
stage), without a new interpreter: no second import of torch and the models' libraries.

One subprocess smoke test per entry script stays (the real interpreter start-up, exit status,
terminal output); every other test of a CLI's behaviour can run it here.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra

from densex.utils.logging import _SET_BY_US

REPO = Path(__file__).resolve().parents[2]


def run_script(script: str, *args: str) -> int:
    """`python SCRIPT ARGS...` (SCRIPT relative to the repository root) in this process; its
    exit status (a `SystemExit` becomes its code, any other exception propagates). What a
    script may set for its own run is restored after it: argv, Hydra's global state, the
    `densex` logger's level, torch's random state and threads, `OMP_NUM_THREADS` and
    transformers' log verbosity (a benchmark seeds torch, sets threads, quiets transformers)."""
    import torch
    from transformers.utils import logging as transformers_logging

    path = str(REPO / script)
    argv = sys.argv
    sys.argv = [path, *args]
    verbosity, threads = transformers_logging.get_verbosity(), torch.get_num_threads()
    omp = os.environ.get("OMP_NUM_THREADS")
    GlobalHydra.instance().clear()  # a compose() of an earlier test must not be in the way
    # the `densex` logger as a fresh process has it (no level of its own): a level an earlier
    # test left on it (an API call's WARNING, restored by hand) would silence the entry's INFO
    # lines, the plan's tables among them
    pkg = logging.getLogger("densex")
    level, marker = pkg.level, getattr(pkg, _SET_BY_US, None)
    pkg.setLevel(logging.NOTSET)
    setattr(pkg, _SET_BY_US, None)
    try:
        with torch.random.fork_rng(devices=[]):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    finally:
        sys.argv = argv
        GlobalHydra.instance().clear()
        pkg.setLevel(level)
        setattr(pkg, _SET_BY_US, marker)
        transformers_logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp
    return 0

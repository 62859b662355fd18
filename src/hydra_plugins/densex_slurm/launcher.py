"""hydra-submitit-launcher's SLURM launcher, made to report failed cells instead of hiding them.

`conf/hydra/launcher/slurm.yaml` sets `_target_: hydra_plugins.densex_slurm.launcher.SlurmLauncher`
(Hydra instantiates launchers from the `hydra_plugins` namespace only); everything
else (sbatch parameters, job arrays, submitit's checkpoint-and-requeue on preemption) is the
plugin's. The plugin returns `[job.results()[0] for job in jobs]`: it stops at the first job
that died, while the others still run, and Hydra then skips `on_multirun_end`, so a sweep with
one failed cell wrote no table at all and named neither the job nor its log. This launcher:

- waits for every job of the array before judging any;
- records each failed cell (a SLURM job that died, or a cell whose task raised) in
  `<sweep dir>/failed_cells.jsonl`: cell number, SLURM job id, the cell's overrides, its log
  file, its run dir and the error: the last `error (...): FILE:LINE: ...` line the entry
  printed to the job's log when it exited with one, else the exception's first line
  (`densex.utils.slurm`);
- runs the sweep's `on_multirun_end` callbacks itself (Hydra would not), so the tables of the
  cells that succeeded are written and name the missing ones, then raises `CellsFailed` with
  one line per failed cell.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf

from densex.utils.io import write_jsonl
from densex.utils.logging import get_logger
from densex.utils.slurm import FAILED_CELLS

__all__ = ["CellsFailed", "SlurmLauncher", "located_error"]

log = get_logger(__name__)


class CellsFailed(RuntimeError):
    """Some cells of a SLURM sweep failed; the message has one line per cell."""


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # submitit's FailedJobError quotes the traceback: its last line is the exception itself
    line = lines[-1] if "trace:" in text and lines else (lines[0] if lines else "")
    return f"{type(error).__name__}: {line}"[:500]


# what `densex.pipelines.preflight.run.fail` prints before exiting 2: `error (<kind>): <message>`,
# the message locating the bad input (`FILE:LINE: field ...`) or naming the config key
_ENTRY_ERROR = re.compile(r"^error \([^)]*\): ")
_LOG_TAIL_BYTES = 1 << 20


def located_error(log_path: str | Path) -> str | None:
    """The last `error (...): ...` line an entry printed to the job's log (its stderr), or None
    (no such line, or no log). Reads only the log's last MiB: a job's log can be long."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - _LOG_TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    found = [ln.strip() for ln in tail.splitlines() if _ENTRY_ERROR.match(ln)]
    return found[-1][:2000] if found else None


def _outcome(job: Any) -> tuple[JobReturn | None, BaseException | None]:
    """(the cell's JobReturn, None) when it succeeded; (JobReturn or None, the error) else."""
    died = job.exception()  # waits for the job; None when the job ran to the end
    if died is not None:
        return None, died
    ret = job.results()[0]
    if ret.status != JobStatus.FAILED:
        return ret, None
    try:
        _ = ret.return_value  # re-raises the cell's exception (Hydra's public way to get it)
    except BaseException as error:  # noqa: BLE001 - any exception of the cell is its failure
        return ret, error
    return ret, RuntimeError("cell failed")


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    """`hydra/launcher=slurm`: the plugin's launcher that waits for all cells and reports the
    failed ones (module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """Run one cell in its SLURM job (the plugin's); a cell that raised has its traceback
        written to the job's stderr, the log file the sweep's failure names (Hydra's `run_job`
        catches the exception and returns it, so nothing would be in the log)."""
        ret = super().__call__(*args, **kwargs)
        if ret.status == JobStatus.FAILED:
            try:
                _ = ret.return_value  # re-raises the cell's exception
            except BaseException as error:  # noqa: BLE001 - reported, then returned as is
                traceback.print_exception(error, file=sys.stderr)
                sys.stderr.flush()
        return ret

    def _submit(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
        """Submit the cells as one job array: the plugin's `launch` up to `map_array`."""
        import submitit

        assert self.config is not None
        params = dict(self.params)
        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(
            cluster=self._EXECUTOR,
            folder=params["submitit_folder"],
            **{f"{self._EXECUTOR}_max_num_timeout": params["max_num_timeout"]}
            if "max_num_timeout" in params
            else {},
        )
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                k if k in base else f"{self._EXECUTOR}_{k}": v
                for k, v in params.items()
                if k not in init_keys
            }
        )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info("Submitit '%s' sweep output dir : %s", self._EXECUTOR, sweep_dir)
        args = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}",
                         Singleton.get_state()))  # fmt: skip
        return list(executor.map_array(self, *zip(*args)))

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Run every cell; raise `CellsFailed` (after the sweep's end callbacks) if any failed."""
        jobs = self._submit(job_overrides, initial_job_idx)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        returns, failed = [], []
        for idx, (overrides, job) in enumerate(zip(job_overrides, jobs), start=initial_job_idx):
            ret, error = _outcome(job)
            if error is None:
                returns.append(ret)
                continue
            failed.append({
                "cell": idx,
                "slurm_job_id": str(job.job_id),
                "overrides": filter_overrides(overrides),
                "log": str(job.paths.stderr),
                "run_dir": str(ret.hydra_cfg.hydra.runtime.output_dir) if ret else None,
                # the entry's own located line when it exited with one (submitit's message
                # then only says the job failed), else the exception's
                "error": located_error(job.paths.stderr) or _first_line(error),
            })  # fmt: skip
        (sweep_dir / FAILED_CELLS).unlink(missing_ok=True)
        if not failed:
            return returns
        write_jsonl(sweep_dir / FAILED_CELLS, failed)
        lines = [
            f"cell #{f['cell']} failed in SLURM job {f['slurm_job_id']}: "
            f"{' '.join(f['overrides'])}; log: {f['log']}; {f['error']}"
            for f in failed
        ]
        for line in lines:
            log.error(line)
        assert self.hydra_context is not None
        # Hydra calls on_multirun_end only after a sweep without failures: the tables of the
        # cells that succeeded are written here (they name the missing ones)
        self.hydra_context.callbacks.on_multirun_end(config=self.config)
        raise CellsFailed(
            f"{len(failed)} of {len(jobs)} cells failed ({sweep_dir / FAILED_CELLS}):\n"
            + "\n".join(lines)
        )

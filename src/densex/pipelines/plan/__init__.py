"""`index.py stage=plan`: what each stage will need before anything runs.

`counts` (units of the corpus, or a sample) -> `machine` (dimension, machine, throughputs) ->
`sizes` (the size model: disk, RAM, GPU memory, time; `plan_rows`, `fits`) -> `tables`
(printed tables and notes). `run.plan` returns the rows; `run.run_plan` prints them.
"""

from densex.pipelines.plan.run import plan, run_plan

__all__ = ["plan", "run_plan"]

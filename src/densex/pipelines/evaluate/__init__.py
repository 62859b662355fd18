"""`evaluate.py`: one benchmark cell, in this order.

`cell.open_cell` (units and the cached index, or a fused searcher from `fusion`) ->
`cell.search_cell` (top units -> max-over-units passages) -> `metrics` (recall@k, gold-passage
and QA metrics) -> `retrieval_files` (DPR and pyserini run files) -> `outputs` (results.jsonl,
console table, W&B). `run.run` is the orchestration; `task=propositions` hands over to
`densex.pipelines.propositions`.
"""

"""The Python search API over cached indexes (`densex.open_index`), beside the entries.

`compose` turns the entries' Hydra overrides into one config per granularity, `index` opens
each granularity's cell as `evaluate.py` would (`pipelines.evaluate.cell.open_cell`: units and
index built when missing, then memory-mapped) and searches it, `spans` places each matched unit
inside its passage.
"""

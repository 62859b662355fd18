"""Analyses beyond the paper's point estimates: paired significance between cells,
per-question win/loss, gold-passage rank metrics tables, and rank fusion (RRF, mixed
granularity). Layer: above `report`, below `pipelines`."""

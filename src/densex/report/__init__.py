"""Reports from results rows: the paper's tables (Markdown/CSV), plots, W&B, the sweep callback."""

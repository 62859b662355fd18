"""The entries' pipelines: one package per entry, each exposing `run(cfg) -> metric`.

Layer rule: the top layer. It alone reads the composed Hydra config (`schemas`, `specs`), turns
it into the lower layers' typed objects, and calls them; nothing below imports from here.

    preflight/     every entry goes through `preflight.run.main(cfg, entry)` first
    index/         index.py: units -> embeddings -> faiss index
    evaluate/      evaluate.py: one benchmark cell (task=retrieval) or the propositions report
    propositions/  evaluate.py task=propositions: the propositionizer quality report
    plan/          index.py stage=plan: disk / RAM / time before anything runs
    train/         train.py: fine-tune a propositionizer
"""

"""`index.py`: the cached artifacts of one (corpus, granularity, retriever), stage by stage.

`units.build_corpus_units` (passages + units; propositions generated when the propositionizer
is a model) -> `run.embed_units` (sharded, resumable embeddings) -> the faiss index
(`densex.retrieval.build`). `stage=plan` hands over to `densex.pipelines.plan`.
"""

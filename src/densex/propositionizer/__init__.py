"""Propositionizer: passage -> propositions (data, Lightning module, generation, LLM teacher).

Submodules are imported on use (`from densex.propositionizer.module import ...`) so that
importing the package does not pull in transformers or Lightning.
"""

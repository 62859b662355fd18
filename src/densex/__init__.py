"""densex: retrieval granularity research (passages, sentences, propositions)."""

__version__ = "0.1.0"

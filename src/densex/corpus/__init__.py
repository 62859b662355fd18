"""Corpus: documents -> 100-word passages -> passage / sentence / proposition units."""

from densex.corpus.documents import read_documents
from densex.corpus.readers import Skips, read_passages
from densex.corpus.segment import chunk_sentences, load_sentencizer, split_sentences
from densex.corpus.spec import GRANULARITIES
from densex.corpus.units import UnitFiles, build_units, print_unit_table, unit_stats
from densex.corpus.units_key import units_dir_for

__all__ = [
    "GRANULARITIES",
    "Skips",
    "UnitFiles",
    "build_units",
    "chunk_sentences",
    "load_sentencizer",
    "print_unit_table",
    "read_documents",
    "read_passages",
    "split_sentences",
    "unit_stats",
    "units_dir_for",
]

"""Downstream QA under a word budget: context cut, reader EM@l, answer recall, popularity.

`qa_metrics` (cell.py) is what the evaluate pipeline calls for one benchmark cell; the
other modules are its parts and the Figure 3 analysis.
"""

from densex.qa.budget import first_words, words_of

__all__ = ["first_words", "words_of"]

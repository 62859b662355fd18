"""Evaluation question sets: every shipped format -> `{"id", "question", "answers"}` rows."""

from densex.data.questions import load_dataset_questions, load_questions, questions_from_hf

__all__ = ["load_dataset_questions", "load_questions", "questions_from_hf"]

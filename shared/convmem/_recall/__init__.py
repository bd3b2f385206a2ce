"""Recall of earlier turns: lexical and vector indexes, search, ranking and rendering."""

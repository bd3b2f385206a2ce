"""The SQLite store: an embedded log with its FTS5 keyword index."""

"""State derived from the log: the rolling summary, facts, the LLM calls and background work."""

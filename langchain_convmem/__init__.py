"""LangChain integration for convmem."""

__all__: list[str] = []

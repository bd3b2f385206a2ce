"""A LlamaIndex ``BaseEmbedding`` as the embedder of convmem's semantic recall."""

from __future__ import annotations

from typing import Any

from convmem import ConfigError
from convmem.integration import BaseEmbedder

__all__ = ["LlamaIndexEmbedder"]


class LlamaIndexEmbedder(BaseEmbedder):
    """Use a LlamaIndex ``BaseEmbedding`` as an embedder.

    Documents go through ``get_text_embedding_batch`` and queries through
    ``get_query_embedding`` (models that prefix queries differently keep doing
    so); async calls use their ``aget_*`` twins. The dimension is learnt from
    the first vector unless given.

    Example::

        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
        embedder = LlamaIndexEmbedder(HuggingFaceEmbedding("BAAI/bge-small-en-v1.5"))
    """

    def __init__(
        self, embed_model: Any, *, name: str | None = None, dimension: int | None = None, batch_size: int = 64
    ) -> None:
        if not callable(getattr(embed_model, "get_text_embedding_batch", None)) or not callable(
            getattr(embed_model, "get_query_embedding", None)
        ):
            raise ConfigError(
                "LlamaIndexEmbedder needs a llama_index BaseEmbedding (get_text_embedding_batch, "
                f"get_query_embedding), got {type(embed_model).__name__}"
            )
        self.embed_model = embed_model
        model = getattr(embed_model, "model_name", None)
        default = f"llamaindex:{type(embed_model).__name__}" + (f":{model}" if isinstance(model, str) else "")
        super().__init__(name=name or default, dimension=dimension, batch_size=batch_size)

    def _embed(self, texts: list[str], *, query: bool) -> Any:
        if query:
            return [self.embed_model.get_query_embedding(texts[0])]
        return self.embed_model.get_text_embedding_batch(texts)

    async def _aembed(self, texts: list[str], *, query: bool) -> Any:
        if query:
            return [await self.embed_model.aget_query_embedding(texts[0])]
        return await self.embed_model.aget_text_embedding_batch(texts)

"""A LangChain ``Embeddings`` as the embedder of convmem's semantic recall."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from langchain_core.embeddings import Embeddings

from convmem import ConfigError
from convmem.integration import BaseEmbedder, is_component

if TYPE_CHECKING:
    from convmem import Embedder

__all__ = ["LangChainEmbedder", "as_embedder"]


class LangChainEmbedder(BaseEmbedder):
    """Use a LangChain ``Embeddings`` (``embed_documents`` / ``embed_query``) as an embedder.

    Async calls use the model's ``aembed_*`` methods. The dimension is learnt
    from the first vector unless given.

    Example::

        from langchain_openai import OpenAIEmbeddings
        embedder = LangChainEmbedder(OpenAIEmbeddings(model="text-embedding-3-small"))
    """

    def __init__(
        self, embeddings: Any, *, name: str | None = None, dimension: int | None = None, batch_size: int = 64
    ) -> None:
        if not callable(getattr(embeddings, "embed_documents", None)) or not callable(
            getattr(embeddings, "embed_query", None)
        ):
            raise ConfigError(
                f"LangChainEmbedder needs an object with embed_documents and embed_query, "
                f"got {type(embeddings).__name__}"
            )
        self.embeddings = embeddings
        model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        default = f"langchain:{type(embeddings).__name__}" + (f":{model}" if isinstance(model, str) else "")
        super().__init__(name=name or default, dimension=dimension, batch_size=batch_size)

    def _embed(self, texts: list[str], *, query: bool) -> Any:
        if query:
            return [self.embeddings.embed_query(texts[0])]
        return self.embeddings.embed_documents(texts)

    async def _aembed(self, texts: list[str], *, query: bool) -> Any:
        if query:
            return [await self.embeddings.aembed_query(texts[0])]
        return await self.embeddings.aembed_documents(texts)


def as_embedder(embedder: object, argument: str = "embedder") -> Embedder:
    """`embedder` as convmem's recall takes it: a LangChain ``Embeddings`` wrapped in
    `LangChainEmbedder`, a convmem `Embedder` as it is; anything else is a `ConfigError`
    naming `argument`, the type received and what is allowed."""
    if isinstance(embedder, Embeddings):
        return LangChainEmbedder(embedder)
    if is_component("embedder", embedder):  # looked up, not read: no dimension probe
        return cast("Embedder", embedder)
    raise ConfigError(
        f"{argument} must be a convmem Embedder (SentenceTransformerEmbedder(), HashingEmbedder(), "
        f"LangChainEmbedder(...), ...) or a LangChain Embeddings, got {type(embedder).__name__}"
    )

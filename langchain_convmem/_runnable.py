"""`ConvMemRunnable` / `with_convmem`: a chain with memory that retrieves for the new input.

`RunnableWithMessageHistory` reads the history before the new input reaches
it, so recall cannot search for what the user just asked. This runnable builds
the context for the incoming message, injects it into the chain's input, and
records the turn: the question is stored as RUNNING when the chain starts, then
the answer and the final status (COMPLETED, FAILED when the chain raises,
CANCELLED when it is interrupted or a stream is abandoned).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from typing import Any, cast

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.utils import AddableDict, ConfigurableFieldSpec

from convmem import (
    ConfigError,
    ConversationMemory,
    InvalidMessageError,
    InvalidSessionIdError,
    MemoryConfig,
    Message,
    Role,
    Store,
    TokenCounter,
    TurnStatus,
)

from ._convert import context_to_langchain, latest_human_text, to_convmem_messages
from ._history import (
    ConvMemChatMessageHistory,
    ConvMemSessions,
    check_budget,
    check_config_keys,
    check_key,
    check_options,
)

__all__ = ["ConvMemRunnable", "with_convmem"]


@dataclasses.dataclass(frozen=True)
class _Turn:
    """One invocation: the chain's input with the context injected, and the stored question."""

    memory: ConversationMemory
    chain_input: Any
    stored: list[Message]


def _add_chunks(total: Any, chunk: Any) -> Any:
    if total is None:
        return chunk
    if isinstance(total, Mapping) and isinstance(chunk, Mapping):
        return AddableDict(total) + AddableDict(chunk)
    try:
        return total + chunk
    except TypeError:  # chunks that do not add up: the last one is the output
        return chunk


class ConvMemRunnable(Runnable[Any, Any]):
    """Wraps a chain so that every call sees the managed context built for its input.

    Per call: read ``session_id`` (and ``user_id``) from
    ``config["configurable"]``; build the context with the new human message as
    the query (so recall finds what is relevant to it, and the budget counts
    it); inject the context; store the new input as a RUNNING turn; run the
    chain; store the output and mark the turn COMPLETED, or FAILED when the
    chain raises, or CANCELLED when it is interrupted. ``stream``/``astream``
    record the whole output once the stream ends.

    Input and output shapes follow `RunnableWithMessageHistory`:

    - ``history_messages_key`` set: the input is a dict; the context goes
      under that key (e.g. a ``MessagesPlaceholder("history")``) and the new
      message is read from ``input_messages_key`` (a string or messages).
    - otherwise the context is put before the input messages: in the list
      itself, or in ``input[input_messages_key]`` for a dict input.
    - the output may be a string, a message, a list of messages, or a dict
      holding them under ``output_messages_key``.

    Example::

        prompt = ChatPromptTemplate.from_messages(
            [MessagesPlaceholder("history"), ("human", "{question}")]
        )
        chain = with_convmem(
            prompt | model,
            ConvMemSessions("chat.db"),
            input_messages_key="question",
            history_messages_key="history",
        )
        chain.invoke({"question": "What is my dog called?"},
                     config={"configurable": {"session_id": "s1"}})
    """

    def __init__(
        self,
        runnable: Runnable[Any, Any] | Callable[..., Any],
        sessions: ConvMemSessions | Callable[..., BaseChatMessageHistory] | None = None,
        *,
        input_messages_key: str | None = None,
        history_messages_key: str | None = None,
        output_messages_key: str | None = None,
        budget: int | None = None,
        session_id_key: str = "session_id",
        user_id_key: str = "user_id",
        path: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        counter: TokenCounter | None = None,
        **memory_options: Any,
    ) -> None:
        check_options(ConvMemRunnable.__init__, memory_options)
        self.get_session_history: Callable[..., BaseChatMessageHistory] | None = None
        if sessions is not None and not isinstance(sessions, ConvMemSessions) and callable(sessions):
            # A plain `get_session_history`, as RunnableWithMessageHistory takes.
            given = {"path": path, "store": store, "config": config, "counter": counter, **memory_options}
            extra = sorted(name for name, value in given.items() if value is not None)
            if extra:
                raise ConfigError(
                    f"pass get_session_history or the options to build sessions, not both (also got {extra})"
                )
            self.get_session_history = sessions
            sessions = None
        self.sessions = ConvMemSessions.from_options(
            sessions, path=path, store=store, config=config, counter=counter, **memory_options
        )
        self.runnable = coerce_to_runnable(runnable)
        self.input_messages_key = check_key(
            "input_messages_key",
            input_messages_key,
            holds="the input dict's key of the new message",
            or_none=True,
        )
        self.history_messages_key = check_key(
            "history_messages_key",
            history_messages_key,
            holds="the input dict's key the context goes under",
            or_none=True,
        )
        self.output_messages_key = check_key(
            "output_messages_key",
            output_messages_key,
            holds="the output dict's key of the answer",
            or_none=True,
        )
        self.budget = check_budget(budget)
        self.session_id_key, self.user_id_key = check_config_keys(session_id_key, user_id_key)

    def __repr__(self) -> str:
        return f"ConvMemRunnable({self.runnable!r}, {self.sessions!r})"

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """The session id and user id keys a call's ``config["configurable"]`` takes, then the
        wrapped runnable's own fields."""
        own = [
            ConfigurableFieldSpec(
                id=self.session_id_key,
                annotation=str,
                name="Session ID",
                description="Unique identifier of the conversation.",
                default="",
                is_shared=True,
            ),
            ConfigurableFieldSpec(
                id=self.user_id_key,
                annotation=str | None,
                name="User ID",
                description="The user the conversation belongs to (optional).",
                default=None,
                is_shared=True,
            ),
        ]
        inner = [spec for spec in self.runnable.config_specs if spec.id not in {s.id for s in own}]
        return own + inner

    # -- the turn, shared by every entry point ---------------------------------------

    def _memory(self, config: RunnableConfig | None) -> ConversationMemory:
        configurable = (config or {}).get("configurable") or {}
        session_id = configurable.get(self.session_id_key)
        if session_id is None or session_id == "":
            raise InvalidSessionIdError(
                f"config['configurable'][{self.session_id_key!r}] is missing; call "
                f".invoke(input, config={{'configurable': {{{self.session_id_key!r}: 'conversation-1'}}}})"
            )
        user_id = configurable.get(self.user_id_key)
        if self.get_session_history is None:
            return self.sessions.memory(session_id, user_id)
        return self._memory_from_factory(session_id, user_id)

    def _memory_from_factory(self, session_id: str, user_id: str | None) -> ConversationMemory:
        factory = self.get_session_history
        assert factory is not None
        try:
            parameters = inspect.signature(factory).parameters
        except (TypeError, ValueError):  # a builtin or C callable: pass the session only
            parameters = {}  # type: ignore[assignment]
        takes_user = self.user_id_key in parameters or any(
            p.kind is p.VAR_KEYWORD for p in parameters.values()
        )
        if takes_user and user_id not in (None, ""):
            history = factory(session_id, **{self.user_id_key: user_id})
        else:
            history = factory(session_id)
        if not isinstance(history, ConvMemChatMessageHistory):
            raise ConfigError(
                f"get_session_history returned a {type(history).__name__}; with_convmem builds the "
                "context from a convmem memory, so it must return a ConvMemChatMessageHistory "
                "(or pass ConvMemSessions(...) instead)"
            )
        return history.memory

    def _input_key(self, value: Mapping[str, Any]) -> str:
        if self.input_messages_key is not None:
            return self.input_messages_key
        return next(iter(value)) if len(value) == 1 else "input"

    def _input_messages(self, value: Any) -> list[BaseMessage]:
        if isinstance(value, Mapping):
            key = self._input_key(value)
            if key not in value:
                raise InvalidMessageError(
                    f"the input dict has no key {key!r} (keys: {sorted(value)}); set input_messages_key"
                )
            value = value[key]
        if isinstance(value, str):
            return [HumanMessage(content=value)]
        if isinstance(value, BaseMessage):
            return [value]
        if isinstance(value, (list, tuple)):
            if len(value) == 1 and isinstance(value[0], (list, tuple)):
                value = value[0]
            return list(value)
        raise InvalidMessageError(
            f"expected the new input as a str, a message or a list of messages, got "
            f"{type(value).__name__}: {value!r:.80}"
        )

    def _output_messages(self, value: Any) -> list[BaseMessage]:
        if isinstance(value, Mapping):
            if self.output_messages_key is not None:
                key = self.output_messages_key
            else:
                key = next(iter(value)) if len(value) == 1 else "output"
            if key not in value:
                raise InvalidMessageError(
                    f"the chain's output dict has no key {key!r} (keys: {sorted(value)}); "
                    "set output_messages_key"
                )
            value = value[key]
        if isinstance(value, str):
            return [AIMessage(content=value)]
        if isinstance(value, BaseMessage):
            return [value]
        if isinstance(value, (list, tuple)) and all(isinstance(m, BaseMessage) for m in value):
            return list(value)
        raise InvalidMessageError(
            f"cannot record the chain's output {type(value).__name__}: {value!r:.80}; it must be a str, "
            "a message, a list of messages, or a dict holding one under output_messages_key"
        )

    def _inject(self, value: Any, history: list[BaseMessage], new: list[BaseMessage]) -> Any:
        if self.history_messages_key is not None:
            if not isinstance(value, Mapping):
                raise InvalidMessageError(
                    f"with history_messages_key={self.history_messages_key!r} the input must be a dict, "
                    f"got {type(value).__name__}"
                )
            return {**value, self.history_messages_key: history}
        if isinstance(value, Mapping):
            return {**value, self._input_key(value): history + new}
        return history + new

    def _plan(self, value: Any) -> tuple[list[BaseMessage], list[Message], str | None]:
        new = self._input_messages(value)
        pending = to_convmem_messages(new, status=TurnStatus.RUNNING)
        return new, pending, latest_human_text(new)

    def _begin(self, value: Any, config: RunnableConfig) -> _Turn:
        memory = self._memory(config)
        new, pending, query = self._plan(value)
        context = memory.build_context(query, self.budget)
        chain_input = self._inject(value, context_to_langchain(context), new)
        return _Turn(memory, chain_input, memory.add_messages(pending))

    async def _abegin(self, value: Any, config: RunnableConfig) -> _Turn:
        memory = self._memory(config)
        new, pending, query = self._plan(value)
        context = await memory.abuild_context(query, self.budget)
        chain_input = self._inject(value, context_to_langchain(context), new)
        return _Turn(memory, chain_input, await memory.aadd_messages(pending))

    def _answer(self, turn: _Turn, output: Any, status: TurnStatus) -> list[Message]:
        """The output as messages to store. A completed turn whose output cannot be
        recorded fails with that error; a failed or cancelled one keeps its question
        and drops the partial output rather than hide the original error."""
        if output is None:
            return []
        try:
            answer = to_convmem_messages(self._output_messages(output), status=status)
        except InvalidMessageError:
            if status is not TurnStatus.COMPLETED:
                return []
            self._set_status(turn, TurnStatus.FAILED)
            raise
        # Another turn of this session may have been stored since this question:
        # name the question, so the answer is not paired with the newer one.
        question = next((m.seq for m in reversed(turn.stored) if m.role is Role.USER), None)
        return [m if m.role is Role.USER else dataclasses.replace(m, reply_to_seq=question) for m in answer]

    def _finish(self, turn: _Turn, output: Any, status: TurnStatus) -> None:
        turn.memory.add_messages(self._answer(turn, output, status))
        self._set_status(turn, status)

    async def _afinish(self, turn: _Turn, output: Any, status: TurnStatus) -> None:
        await turn.memory.aadd_messages(self._answer(turn, output, status))
        await asyncio.to_thread(self._set_status, turn, status)

    @staticmethod
    def _set_status(turn: _Turn, status: TurnStatus) -> None:
        for message in turn.stored:
            if message.seq is not None:
                turn.memory.set_status(message.seq, status)

    # -- Runnable interface -----------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self._call_with_config(self._invoke, input, config, **kwargs)

    def _invoke(
        self, value: Any, run_manager: CallbackManagerForChainRun, config: RunnableConfig, **kwargs: Any
    ) -> Any:
        turn = self._begin(value, config)
        try:
            output = self.runnable.invoke(turn.chain_input, config, **kwargs)
        except Exception:
            self._finish(turn, None, TurnStatus.FAILED)
            raise
        except BaseException:
            self._finish(turn, None, TurnStatus.CANCELLED)
            raise
        self._finish(turn, output, TurnStatus.COMPLETED)
        return output

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await self._acall_with_config(self._ainvoke, input, config, **kwargs)

    async def _ainvoke(
        self,
        value: Any,
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
        **kwargs: Any,
    ) -> Any:
        turn = await self._abegin(value, config)
        try:
            output = await self.runnable.ainvoke(turn.chain_input, config, **kwargs)
        except Exception:
            self._finish(turn, None, TurnStatus.FAILED)
            raise
        except BaseException:  # cancelled: record it without awaiting again
            self._finish(turn, None, TurnStatus.CANCELLED)
            raise
        await self._afinish(turn, output, TurnStatus.COMPLETED)
        return output

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        yield from self._transform_stream_with_config(iter([input]), self._stream, config, **kwargs)

    def _stream(
        self,
        inputs: Iterator[Any],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
        **kwargs: Any,
    ) -> Iterator[Any]:
        turn = self._begin(_single(inputs), config)
        total: Any = None
        try:
            for chunk in self.runnable.stream(turn.chain_input, config, **kwargs):
                total = _add_chunks(total, chunk)
                yield chunk
        except Exception:
            self._finish(turn, total, TurnStatus.FAILED)
            raise
        except BaseException:  # GeneratorExit: the consumer stopped reading
            self._finish(turn, total, TurnStatus.CANCELLED)
            raise
        self._finish(turn, total, TurnStatus.COMPLETED)

    async def astream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        async def single() -> AsyncIterator[Any]:
            yield input

        stream = cast(
            AsyncGenerator[Any, None],
            self._atransform_stream_with_config(single(), self._astream, config, **kwargs),
        )
        try:
            async for chunk in stream:
                yield chunk
        except GeneratorExit:
            # Closed by the caller (`aclose()`): the turn is recorded now, not when the stream
            # is collected. Not while the event loop closes every generator left at its end:
            # it closes the stream too, at the same time, and a second close would raise.
            if not getattr(asyncio.get_running_loop(), "_asyncgens_shutdown_called", False):
                await stream.aclose()
            raise

    async def _astream(
        self,
        inputs: AsyncIterator[Any],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        value = None
        async for value in inputs:  # noqa: B007 - one input
            pass
        turn = await self._abegin(value, config)
        total: Any = None
        try:
            async for chunk in self.runnable.astream(turn.chain_input, config, **kwargs):
                total = _add_chunks(total, chunk)
                yield chunk
        except Exception:
            self._finish(turn, total, TurnStatus.FAILED)
            raise
        except BaseException:  # cancelled or closed early: no awaiting from here
            self._finish(turn, total, TurnStatus.CANCELLED)
            raise
        await self._afinish(turn, total, TurnStatus.COMPLETED)


def _single(inputs: Iterator[Any]) -> Any:
    value = None
    for value in inputs:  # noqa: B007 - one input
        pass
    return value


def with_convmem(
    runnable: Runnable[Any, Any] | Callable[..., Any],
    sessions: ConvMemSessions | Callable[..., BaseChatMessageHistory] | None = None,
    *,
    input_messages_key: str | None = None,
    history_messages_key: str | None = None,
    output_messages_key: str | None = None,
    budget: int | None = None,
    **options: Any,
) -> ConvMemRunnable:
    """Give `runnable` a conversation memory that retrieves for each new input.

    Shorthand for `ConvMemRunnable`; ``options`` are its other keyword
    arguments (``path``, ``store``, ``config``, ``session_id_key``, ...).
    `sessions` may be `ConvMemSessions` or, as for `RunnableWithMessageHistory`,
    a ``get_session_history(session_id)`` function that returns a
    `ConvMemChatMessageHistory`. An unknown option is a `ConfigError` here,
    not on the first call.
    """
    return ConvMemRunnable(
        runnable,
        sessions,
        input_messages_key=input_messages_key,
        history_messages_key=history_messages_key,
        output_messages_key=output_messages_key,
        budget=budget,
        **options,
    )

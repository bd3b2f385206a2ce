"""Rich values in message fields, stored as JSON and read back equal.

LangChain lets a message carry more than JSON: a RAG tool's ``artifact`` is a
list of `Document`s, ``additional_kwargs`` may hold datetimes, bytes or pydantic
models. convmem stores messages as JSON, so such values are written in a tagged
form and revived when the message is read:

- LangChain objects (`Document`, messages) use LangChain's own serialization
  (``Serializable.to_json`` / ``langchain_core.load.load``) with a fixed
  allow-list, `ALLOWED_LANGCHAIN_CLASSES`: a stored payload can never name
  another class;
- other pydantic models are revived only if their class was allowed with
  `allow_model_class`; otherwise they come back as the dict they dumped to;
- datetimes, dates, times, timedeltas, bytes, UUIDs, decimals, tuples and sets
  have a tag each.

Plain JSON values are stored as they are, so existing rows read unchanged.
Nothing here uses pickle or imports a class named in stored data.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import threading
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document
from langchain_core.load import load
from langchain_core.load.serializable import Serializable
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from pydantic import BaseModel

from convmem import InvalidMessageError

__all__ = ["ALLOWED_LANGCHAIN_CLASSES", "allow_model_class", "from_storable", "to_storable"]

ALLOWED_LANGCHAIN_CLASSES: tuple[type[Serializable], ...] = (
    Document,
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
"""The LangChain classes a stored value may be revived as."""

_TAG = "__convmem_type__"
_allowed_models: dict[str, type[BaseModel]] = {}
_allowed_models_lock = threading.Lock()


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def allow_model_class(cls: type[BaseModel]) -> type[BaseModel]:
    """Let stored instances of the pydantic model `cls` be revived as `cls` (usable as a decorator).

    Without it, a stored model comes back as the dict ``model_dump()`` made of it.
    """
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise TypeError(f"allow_model_class takes a pydantic model class, got {cls!r}")
    with _allowed_models_lock:
        _allowed_models[_class_path(cls)] = cls
    return cls


def to_storable(value: Any, where: str) -> Any:
    """`value` as JSON data (tagged where JSON has no type for it); `where` names it in errors."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidMessageError(f"{where} holds {value!r}, which JSON cannot store")
        return value
    if isinstance(value, list):
        return [to_storable(item, where) for item in value]
    if isinstance(value, Mapping):
        items = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidMessageError(
                    f"{where} has a non-string key {key!r}; JSON objects need string keys"
                )
            items[key] = to_storable(item, where)
        # A user's dict that happens to use our tag must not be read as a tagged value.
        return {_TAG: "dict", "items": items} if _TAG in items else items
    if isinstance(value, Serializable) and type(value) in ALLOWED_LANGCHAIN_CLASSES:
        data = value.to_json()
        return {_TAG: "langchain", "id": data["id"], "kwargs": to_storable(data.get("kwargs", {}), where)}
    if isinstance(value, BaseModel):
        return {
            _TAG: "pydantic",
            "class": _class_path(type(value)),
            "data": to_storable(value.model_dump(), where),
        }
    if isinstance(value, datetime.datetime):
        return {_TAG: "datetime", "value": value.isoformat()}
    if isinstance(value, datetime.date):
        return {_TAG: "date", "value": value.isoformat()}
    if isinstance(value, datetime.time):
        return {_TAG: "time", "value": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {_TAG: "timedelta", "value": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, (bytes, bytearray)):
        return {_TAG: "bytes", "value": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {_TAG: "uuid", "value": str(value)}
    if isinstance(value, decimal.Decimal):
        return {_TAG: "decimal", "value": str(value)}
    if isinstance(value, tuple):
        return {_TAG: "tuple", "items": [to_storable(item, where) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {_TAG: "set", "items": [to_storable(item, where) for item in value]}
    raise InvalidMessageError(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which convmem cannot "
        "store: use JSON values, datetimes, bytes, pydantic models or LangChain Documents/messages"
    )


def from_storable(data: Any) -> Any:
    """The value `to_storable` was given (a pydantic model of a class not allowed: its dict)."""
    if isinstance(data, list):
        return [from_storable(item) for item in data]
    if not isinstance(data, dict):
        return data
    tag = data.get(_TAG)
    if tag is None:
        return {key: from_storable(item) for key, item in data.items()}
    if tag == "dict":
        return {key: from_storable(item) for key, item in data["items"].items()}
    if tag == "langchain":
        kwargs = from_storable(data["kwargs"])
        manifest = {"lc": 1, "type": "constructor", "id": list(data["id"]), "kwargs": kwargs}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `load` is marked beta
            return load(manifest, allowed_objects=ALLOWED_LANGCHAIN_CLASSES)
    if tag == "pydantic":
        fields = from_storable(data["data"])
        with _allowed_models_lock:
            cls = _allowed_models.get(data["class"])
        return cls.model_validate(fields) if cls is not None else fields
    if tag == "datetime":
        return datetime.datetime.fromisoformat(data["value"])
    if tag == "date":
        return datetime.date.fromisoformat(data["value"])
    if tag == "time":
        return datetime.time.fromisoformat(data["value"])
    if tag == "timedelta":
        days, seconds, microseconds = data["value"]
        return datetime.timedelta(days=days, seconds=seconds, microseconds=microseconds)
    if tag == "bytes":
        return base64.b64decode(data["value"])
    if tag == "uuid":
        return uuid.UUID(data["value"])
    if tag == "decimal":
        return decimal.Decimal(data["value"])
    if tag == "tuple":
        return tuple(from_storable(item) for item in data["items"])
    if tag == "set":
        return {from_storable(item) for item in data["items"]}
    raise InvalidMessageError(
        f"stored value has an unknown {_TAG} {tag!r}; was it written by a newer convmem?"
    )

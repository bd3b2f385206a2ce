"""Facts the rule extractor takes from real chats, and labels that say which of them are true.

The chats are the evaluation data of ``../shared/data`` (see its README), read
at run time and never copied here: the 48 LongMemEval histories (user turns as
the user, assistant turns as the assistant, each session as the extractor
would see it) and the LoCoMo conversations (a chat of two people: every turn a
user message named after its speaker).

A label names one fact the extractor emitted without holding any of the data's
text: the history or conversation, the session and turn, the key (a
``prefix:thing`` key keeps its prefix and a hash of the thing, which is the
data's words) and a hash of the value, whether it was negated, and a verdict:

- ``good``: the speaker says it of themselves, it holds beyond the moment, and
  the line reads right (``likes: hiking``, ``pet_name: Luna``, ``city: Boston``);
- ``reaction``: liking what the chat just offered or talked about, not a
  standing fact (``likes: quinoa bowl idea``, ``likes: third option``);
- ``fragment``: a value cut or split wrongly, or naming nothing (``loves: it's``,
  ``loves: 100 on the cw``, ``prefers: online shopping due``);
- ``not the speaker``: a hypothetical, pasted or quoted text, someone else;
- ``wrong key``: true words under the wrong key (``pet: snake`` for a snake plant).

`tests/derived/test_real_chat_facts.py` scores the extractor against the labels
when the data is present; `benchmarks/bench_fact_precision.py` prints the
figures, and lists facts not labelled yet so that a person can label them.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from convmem import Fact, Message

LABELS = Path(__file__).resolve().parent / "real_chat_fact_labels.jsonl"
VERDICTS = ("good", "reaction", "fragment", "not the speaker", "wrong key")
SOURCES = ("longmemeval", "locomo")


def data_dir() -> Path | None:
    """``../shared/data`` beside the repository (or ``$CONVMEM_DATA``), when it holds both data sets."""
    configured = os.environ.get("CONVMEM_DATA")
    candidates = (
        [Path(configured)]
        if configured
        else [parent / "shared" / "data" for parent in Path(__file__).resolve().parents[1:4]]
    )
    for candidate in candidates:
        if (candidate / "longmemeval-s-dev.json.gz").is_file() and (candidate / "locomo-dev.json").is_file():
            return candidate
    return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Found:
    """One fact the extractor emitted, and where: `sample` is a question id or a conversation id."""

    source: str
    sample: str
    session: int
    turn: int
    fact: Fact

    @property
    def label_key(self) -> tuple[str, str, int, int, str, str, bool]:
        prefix, colon, thing = self.fact.key.partition(":")
        key = f"{prefix}:#{_digest(thing)}" if colon else self.fact.key
        return (
            self.source,
            self.sample,
            self.session,
            self.turn,
            key,
            _digest(self.fact.value),
            self.fact.negated,
        )


def _longmemeval(folder: Path) -> Iterator[tuple[str, str, int, list[Message]]]:
    with gzip.open(folder / "longmemeval-s-dev.json.gz", "rt", encoding="utf-8") as file:
        questions = json.load(file)
    for question in questions:
        for session, turns in enumerate(question["haystack_sessions"]):
            messages = [
                dataclasses.replace(Message.create(turn["role"], turn["content"]), seq=index)
                for index, turn in enumerate(turns)
            ]
            yield "longmemeval", question["question_id"], session, messages


def _locomo(folder: Path) -> Iterator[tuple[str, str, int, list[Message]]]:
    samples = json.loads((folder / "locomo-dev.json").read_text(encoding="utf-8"))
    for sample in samples:
        conversation = sample["conversation"]
        session = 1
        while f"session_{session}" in conversation:
            messages = [
                dataclasses.replace(Message.create("user", turn["text"], name=turn["speaker"]), seq=index)
                for index, turn in enumerate(conversation[f"session_{session}"])
            ]
            yield "locomo", sample["sample_id"], session, messages
            session += 1


def find_facts(folder: Path, extract: Callable[[list[Message]], Sequence[Fact]]) -> list[Found]:
    """Every fact `extract` (e.g. ``RuleFactExtractor().extract``) takes from the chats in `folder`,
    one session at a time."""
    found = []
    for chats in (_longmemeval(folder), _locomo(folder)):
        for source, sample, session, messages in chats:
            for fact in extract(messages):
                assert fact.seq is not None
                found.append(Found(source, sample, session, fact.seq, fact))
    return found


def load_labels(path: Path = LABELS) -> dict[tuple[str, str, int, int, str, str, bool], str]:
    """The labels: a fact's `Found.label_key` -> its verdict."""
    labels = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            key = (
                row["source"],
                row["sample"],
                row["session"],
                row["turn"],
                row["key"],
                row["value_sha256"],
                row.get("negated", False),
            )
            assert row["verdict"] in VERDICTS, row
            labels[key] = row["verdict"]
    return labels


def label_row(found: Found, verdict: str) -> str:
    """The line of the labels file that gives `found` its `verdict`."""
    source, sample, session, turn, key, value, negated = found.label_key
    row = {"source": source, "sample": sample, "session": session, "turn": turn, "key": key}
    row["value_sha256"] = value
    if negated:
        row["negated"] = True
    row["verdict"] = verdict
    return json.dumps(row, ensure_ascii=False)


@dataclasses.dataclass
class Figures:
    """How the emitted facts fare against the labels."""

    good: int = 0
    bad: int = 0
    unlabelled: int = 0
    good_labelled: int = 0
    """Facts labelled good, emitted or not: `recall` is the share still emitted."""

    @property
    def precision(self) -> float:
        return self.good / (self.good + self.bad) if self.good + self.bad else 1.0

    @property
    def recall(self) -> float:
        return self.good / self.good_labelled if self.good_labelled else 1.0


def score(
    found: Sequence[Found],
    labels: dict[tuple[str, str, int, int, str, str, bool], str],
    source: str | None = None,
) -> Figures:
    figures = Figures()
    emitted = set()
    for item in found:
        if source not in (None, item.source) or item.label_key in emitted:
            continue  # the same fact said twice in a turn is one fact
        emitted.add(item.label_key)
        verdict = labels.get(item.label_key)
        if verdict is None:
            figures.unlabelled += 1
        elif verdict == "good":
            figures.good += 1
        else:
            figures.bad += 1
    figures.good_labelled = sum(
        verdict == "good" and source in (None, key[0]) for key, verdict in labels.items()
    )
    return figures


# A preference, favourite or allergy whose thing is only little words, or ends in one, names
# nothing: "loves: it's", "likes: and", "prefers: podcasts with a".
_LITTLE_WORDS = frozenset(
    """
    a an the and or but to of in on at for with by from it it's its that this these those they them
    i i'd i'm me my you your he she we best most more have has do lol thanks so then there here
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def names_nothing(fact: Fact) -> bool:
    """Whether `fact` is a preference-like fact whose thing is only, or ends in, a little word."""
    _, colon, thing = fact.key.partition(":")
    if not colon:
        return False
    words = re.findall(r"[\w']+", thing.lower())
    return not words or all(word in _LITTLE_WORDS for word in words) or words[-1] in _LITTLE_WORDS

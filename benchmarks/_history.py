"""A synthetic, reproducible mixed Chinese/English chat history for benchmarks, and what
the benchmarks that store it share."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

# Questions about the history below (its dog, train, budget and database), asked in turn.
QUESTIONS = [
    "What did we decide about the database?",
    "我的狗叫什么名字？",
    "When does the train to Shanghai leave?",
    "What is the project budget?",
]

_EN = [
    "I went hiking near the lake with my sister last weekend and we saw three deer.",
    "Can you remind me what we decided about the database migration?",
    "The quarterly report is due on Friday, and the budget is 300,000 yuan.",
    "My corgi Duoduo loves chasing balls in the park every evening.",
    "Let's use PostgreSQL with nightly pg_dump backups and WAL archiving.",
    "Thanks, that makes sense.",
    "What time does the train to Shanghai leave tomorrow morning?",
    "I prefer green tea to coffee, especially in the afternoon.",
]
_ZH = [
    "我养了一只狗，品种是柯基，名字叫多多。",
    "我们上次讨论的数据库迁移方案是什么？",
    "这个项目的截止日期是十二月十五号，预算三十万元。",
    "周末我常去西湖边散步，顺便喝杯龙井茶。",
    "好的，谢谢！",
    "明天早上去上海的高铁几点出发？",
]


def history(size: int, seed: int = 7) -> list[tuple[str, str]]:
    """`size` messages as (role, text), alternating user and assistant."""
    rng = random.Random(seed)
    out = []
    for index in range(size):
        role = "user" if index % 2 == 0 else "assistant"
        pool = _ZH if rng.random() < 0.4 else _EN
        sentences = rng.randint(1, 3)
        out.append((role, " ".join(rng.choice(pool) for _ in range(sentences))))
    return out


def store_history(store: Any, session_id: str, size: int, *, batch: int = 5000) -> None:
    """Append `history(size)` to `store`, `batch` messages per call, with their token counts."""
    from convmem import ApproximateCounter, Message

    counter = ApproximateCounter()
    rows = history(size)
    for start in range(0, size, batch):
        messages = []
        for role, text in rows[start : start + batch]:
            message = Message.create(role, text)
            messages.append(dataclasses.replace(message, token_count=counter.count_message(message)))
        store.append(session_id, messages)


def rss_mb() -> float:
    """This process's resident memory, in MB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")

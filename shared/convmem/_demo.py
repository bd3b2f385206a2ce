"""The scripted conversation that `convmem demo` plays (Chinese and English).

Early turns carry facts (the user's name, city, pet) that fall out of the
recent window long before the last question asks about them.
"""

from __future__ import annotations

DEMO_SESSION = "demo"
DEMO_SYSTEM_PROMPT = "You are a helpful, concise assistant. 你是一个乐于助人的助手。"

DEMO_TURNS: list[tuple[str, str]] = [
    ("你好！", "你好！有什么可以帮你的？"),
    ("我叫李雷，我住在杭州。", "很高兴认识你，李雷！杭州是个美丽的城市。"),
    ("我养了一只狗，品种是柯基，名字叫多多。", "柯基很可爱！多多多大了？"),
    ("多多今年三岁了，特别喜欢追球。", "三岁正是活泼的年纪，追球是很好的运动。"),
    ("I like hiking on weekends and I prefer green tea to coffee.", "Noted: weekend hikes and green tea."),
    ("谢谢", "不客气！"),
    (
        "Can you suggest a hiking trail near West Lake?",
        "Try the Jiuxi Yanshu trail: about 8 km, shaded, easy.",
    ),
    ("How long does it take?", "Around 3 hours at a relaxed pace, including short breaks."),
    ("ok", "Enjoy the walk!"),
    ("我最近在学做饭，想做红烧肉。", "红烧肉的关键是炒糖色和小火慢炖约一个小时。"),
    ("需要哪些调料？", "生抽、老抽、冰糖、料酒、八角、桂皮和姜片。"),
    ("好的", "祝你做饭顺利！"),
    ("My project deadline is December 15 and the budget is 300,000 yuan.", "Got it: Dec 15, 300k yuan."),
    ("We decided to use PostgreSQL for the database.", "PostgreSQL is a solid choice for that workload."),
    ("What about caching?", "Redis in front of the hot queries would cut latency."),
    ("Thanks!", "You're welcome!"),
    ("最近杭州天气怎么样？", "这几天多云，气温在12到18度之间。"),
    ("周末适合去爬山吗？", "周六晴，适合爬山；周日可能有小雨。"),
    ("I moved to Beijing last month, by the way.", "Welcome to Beijing! The hiking near Xiangshan is great."),
    (
        "Which trail near Xiangshan would you recommend?",
        "The Xiangshan north trail: 5 km, views of the city.",
    ),
    ("哈哈", "😊"),
    ("How should I prepare for a 5 km hike with a dog?", "Bring water for both of you and a short leash."),
    ("Good idea, thanks.", "Have fun out there!"),
    (
        "What do I need for the PostgreSQL backups?",
        "Use pg_dump nightly plus WAL archiving for point-in-time recovery.",
    ),
]

DEMO_QUESTION = "我的狗叫什么名字？我现在住在哪个城市？"

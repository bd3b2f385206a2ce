"""Queries a chat user sends, and whether each points to the past: the table `points_to_past` is scored on.

A query points to the past when a good answer needs what was said in earlier
conversation: it refers to that conversation ("the recipe you gave me",
上次说的), asks about the user's own life ("How many bikes do I own?",
我住在哪个城市？), or asks about a person the conversation was about ("What did
Melanie paint last summer?"). Ordinary requests, general-knowledge questions,
short follow-ups and pleasantries do not, even when they name a language, a
country, a book or a year ("Translate 'good morning' into French.").

Half English, half Chinese, written for this table (no benchmark's text). About
30% of it is held out, chosen by a hash of the text rather than by hand, and
was not looked at while the detector was tuned: `TUNING` and `HELD_OUT`.
`tests/recall/test_past_queries.py` asserts floors on both halves and
`benchmarks/bench_intent.py` prints the figures with every miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence

from convmem._language import HAN

KINDS = ("conversation", "user", "person", "request", "knowledge", "follow-up", "smalltalk")
"""What a query is: the first three point to the past, the others do not."""
PAST_KINDS = frozenset(KINDS[:3])


@dataclasses.dataclass(frozen=True)
class Query:
    text: str
    kind: str

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind

    @property
    def past(self) -> bool:
        return self.kind in PAST_KINDS

    @property
    def language(self) -> str:
        return "zh" if HAN.search(self.text) else "en"

    @property
    def held_out(self) -> bool:
        """Three in ten, by a hash of the text: nobody picked which."""
        return hashlib.sha256(self.text.encode()).digest()[0] % 10 < 3


def _table(kind: str, *texts: str) -> list[Query]:
    return [Query(text, kind) for text in texts]


ENGLISH = [
    *_table(
        "conversation",
        "What was the name of the restaurant you recommended last week?",
        "Remind me what we decided about the venue.",
        "Did I already tell you about my trip to Lisbon?",
        "What did you suggest for my sister's birthday present?",
        "You mentioned a book about habits earlier — what was it called?",
        "Can you repeat the packing list you gave me before?",
        "What time did I say the meeting was?",
        "Go back to the itinerary we talked about and add a day in Kyoto.",
        "Which of the three laptops did I end up choosing?",
        "How much did I tell you the rent was?",
        "What was that podcast I mentioned?",
        "Do you remember what I said about my knee injury?",
        "Last time you gave me a recipe for lentil soup; can you send it again?",
        "What did we conclude about the budget yesterday?",
        "Summarize what I've told you about my job search so far.",
        "What's the address of the dentist I told you about?",
        "Earlier you said the deadline was Friday — is that still right?",
    ),
    *_table(
        "user",
        "How many bikes do I own?",
        "What's my dog's name?",
        "Which city do I live in?",
        "When is my wife's birthday?",
        "What do I do for a living?",
        "Am I allergic to anything?",
        "What's my favorite color?",
        "Where did I grow up?",
        "How old is my daughter?",
        "What kind of car do I drive?",
        "Which languages do I speak?",
        "Who is my manager at work?",
        "What instrument am I learning?",
        "How long have I been vegetarian?",
        "Where did I go on vacation in June?",
        "What's the name of my cat?",
        "Do I have any siblings?",
        "Which hotel did I book for the conference?",
        "What was my score on the practice test?",
        "Tell me again what my sister's name is.",
        "Recommend a restaurant I'd like, based on what you know about me.",
    ),
    *_table(
        "person",
        "When did Caroline go to the support group?",
        "What did Melanie paint last summer?",
        "Where does Jon's brother work?",
        "Has Priya adopted the puppy yet?",
        "What books has Tim read this year?",
        "Why did Gina close her store?",
    ),
    *_table(
        "request",
        "Translate 'good morning' into French.",
        "Write a haiku about autumn leaves.",
        "Give me a recipe for banana bread.",
        "Explain how a hash map works.",
        "Draft a polite email declining a meeting invitation.",
        "Convert 72 degrees Fahrenheit to Celsius.",
        "Suggest five names for a bakery in Portland.",
        "Write a Python function that reverses a string.",
        "Summarize the plot of Pride and Prejudice.",
        "Help me plan a three-day itinerary for Rome.",
        "What should I cook for dinner tonight?",
        "How do I reset my router?",
        "Can you recommend a good sci-fi novel?",
        "Make this sentence sound more formal: we need the report asap.",
        "List the planets in order from the Sun.",
        "Fix the grammar in my cover letter.",
        "How can I improve my sleep?",
        "Should I learn Rust or Go first?",
        "I'm bored, tell me a joke.",
        "My code throws a KeyError on line 3 — what does that mean?",
        "I need a catchy title for my blog post about hiking.",
    ),
    *_table(
        "knowledge",
        "What is the capital of Australia?",
        "Who wrote One Hundred Years of Solitude?",
        "When did the Berlin Wall fall?",
        "How does photosynthesis work?",
        "What's the difference between a latte and a cappuccino?",
        "Why is the sky blue?",
        "How many bones are in the human body?",
        "Is Pluto still a planet?",
        "What year did the Titanic sink?",
        "What does GDP stand for?",
    ),
    *_table(
        "follow-up",
        "And why is that?",
        "What about the second one?",
        "Can you make it shorter?",
        "Okay, go on.",
        "Why?",
        "Tell me more.",
        "Any other options?",
        "Hmm, are you sure?",
    ),
    *_table("smalltalk", "Thanks, that helps!", "Sounds good."),
]

CHINESE = [
    *_table(
        "conversation",
        "我上次说的那家餐厅叫什么？",
        "你之前推荐的那本书是什么？",
        "还记得我们上周讨论的旅行计划吗？",
        "我刚才说的会议时间是几点？",
        "你昨天给我的食谱能再发一遍吗？",
        "我们之前定的预算是多少？",
        "我跟你提过我膝盖受伤的事吗？",
        "上次你建议我买哪款笔记本电脑？",
        "把我们之前聊的行程再整理一下。",
        "我之前问过你关于签证的问题，结论是什么？",
        "你说过的那个播客叫什么名字？",
        "我前天告诉你的快递单号是多少？",
        "上回我们说到哪儿了？",
        "那次你帮我写的求职信还在吗？",
        "我们当时为什么选了第二个方案？",
        "我跟你说过的那个牙医的地址是什么？",
        "你之前说截止日期是周五，现在还是吗？",
    ),
    *_table(
        "user",
        "我有几辆自行车？",
        "我的狗叫什么名字？",
        "我住在哪个城市？",
        "我老婆的生日是哪天？",
        "我是做什么工作的？",
        "我对什么过敏？",
        "我最喜欢什么颜色？",
        "我是在哪里长大的？",
        "我女儿今年几岁？",
        "我开的是什么车？",
        "我会说哪几种语言？",
        "我养的猫是什么品种？",
        "我在学什么乐器？",
        "我吃素多久了？",
        "我六月去哪里度假了？",
        "我有兄弟姐妹吗？",
        "我的老板叫什么？",
        "我开会订的是哪家酒店？",
        "我上次模拟考考了多少分？",
        "再告诉我一遍我妹妹叫什么。",
        "根据你对我的了解，推荐一家我会喜欢的餐厅。",
    ),
    *_table(
        "person",
        "小王什么时候去的支持小组？",
        "她上个夏天画了什么？",
        "李雷的哥哥在哪里工作？",
        "张伟后来领养那只小狗了吗？",
        "王芳今年读了哪些书？",
        "老陈为什么把店关了？",
    ),
    *_table(
        "request",
        "把“早上好”翻译成法语。",
        "写一首关于秋天的俳句。",
        "给我一个香蕉面包的做法。",
        "解释一下哈希表是怎么工作的。",
        "帮我写一封礼貌地拒绝会议邀请的邮件。",
        "把72华氏度换算成摄氏度。",
        "给上海的一家面包店起五个名字。",
        "用Python写一个反转字符串的函数。",
        "概括一下《傲慢与偏见》的情节。",
        "帮我规划一个三天的罗马行程。",
        "今晚晚饭我该做什么？",
        "我的路由器怎么重置？",
        "能推荐一本好看的科幻小说吗？",
        "把这句话改得正式一点：我们尽快要报告。",
        "按离太阳的远近列出八大行星。",
        "帮我改一下求职信里的语法错误。",
        "我怎样才能睡得更好？",
        "我应该先学Rust还是Go？",
        "我好无聊，讲个笑话吧。",
        "我的代码第三行报KeyError，这是什么意思？",
        "帮我的徒步博客想个吸引人的标题。",
    ),
    *_table(
        "knowledge",
        "澳大利亚的首都是哪里？",
        "《百年孤独》的作者是谁？",
        "柏林墙是哪一年倒塌的？",
        "光合作用是怎么进行的？",
        "拿铁和卡布奇诺有什么区别？",
        "天空为什么是蓝色的？",
        "人体有多少块骨头？",
        "冥王星还算行星吗？",
        "泰坦尼克号是哪年沉没的？",
        "GDP是什么意思？",
    ),
    *_table(
        "follow-up",
        "为什么？",
        "那第二个呢？",
        "能再短一点吗？",
        "好的，继续。",
        "然后呢？",
        "再多说一点。",
        "还有别的选择吗？",
        "你确定吗？",
    ),
    *_table("smalltalk", "谢谢，很有帮助！", "听起来不错。"),
]

QUERIES = ENGLISH + CHINESE
TUNING = [query for query in QUERIES if not query.held_out]
HELD_OUT = [query for query in QUERIES if query.held_out]


@dataclasses.dataclass(frozen=True)
class Figures:
    """How a detector did on some queries: counts, and the queries it got wrong."""

    true_positives: int
    false_positives: list[Query]
    false_negatives: list[Query]

    @property
    def precision(self) -> float:
        flagged = self.true_positives + len(self.false_positives)
        return self.true_positives / flagged if flagged else 1.0

    @property
    def recall(self) -> float:
        past = self.true_positives + len(self.false_negatives)
        return self.true_positives / past if past else 1.0


def score(detect: Callable[[str], bool], queries: Sequence[Query], language: str | None = None) -> Figures:
    """Precision and recall of `detect` (e.g. `points_to_past`) over `queries`, or those in one language."""
    chosen = [query for query in queries if language in (None, query.language)]
    flagged = {query.text for query in chosen if detect(query.text)}
    return Figures(
        true_positives=sum(query.past and query.text in flagged for query in chosen),
        false_positives=[query for query in chosen if not query.past and query.text in flagged],
        false_negatives=[query for query in chosen if query.past and query.text not in flagged],
    )

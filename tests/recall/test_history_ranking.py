"""Recall over a returning user's whole history: one ranking, passages of long messages,
the user's own words first, and no memory for a request that needs none."""

from __future__ import annotations

import itertools
import logging
import random
import re
from pathlib import Path

import numpy as np
import pytest
from stored_messages import COUNTER, FILLER, long_answer, store_messages
from unheard_subject import UKULELE, check_unheard_subject

from convmem import ConversationMemory, InMemoryStore, Recall, RecallConfig, SQLiteStore, Store
from convmem._recall.embedder import BaseEmbedder
from convmem._recall.intent import ASKS_ABOUT_A_PERSON, past_cue, points_to_past
from convmem._recall.language import has_cjk
from convmem._recall.lexical import BM25Index, information, tokenize
from convmem._recall.passages import LONG_MESSAGE_CHARS, PASSAGE_CHARS, excerpt_text, passage_spans
from convmem._recall.reading import (
    asks_about_user,
    asks_for_suggestions,
    is_small_talk,
    personal_reading,
    points_at_history,
    refers_to_history,
)
from convmem._recall.scoring import unheard


def user_history(store: Store, sessions: dict[str, list[tuple[str, str]]]) -> list[str]:
    for session_id, items in sessions.items():
        store_messages(store, session_id, items)
    return list(sessions)


# -- one collection --------------------------------------------------------------------------


def test_sessions_scored_with_their_summed_statistics_score_as_one_index() -> None:
    rng = random.Random(3)
    words = ["bike", "road", "mountain", "commuter", "many", "own", "ride", "tire", "chain", "helmet"]
    documents = [" ".join(rng.choices(words, k=rng.randint(2, 12))) for _ in range(60)]
    whole = BM25Index()
    parts = [BM25Index(), BM25Index(), BM25Index()]
    for doc_id, text in enumerate(documents):
        whole.add(doc_id, tokenize(text))
        parts[doc_id % 3].add(doc_id, tokenize(text))
    query = tokenize("how many bikes do I own for the mountain trail")
    collection = parts[0].collection(query) + parts[1].collection(query) + parts[2].collection(query)
    joint = {}
    for part in parts:
        joint.update(part.scores(query, collection))
    expected = whole.scores(query)
    assert joint.keys() == expected.keys()
    for doc_id, score in expected.items():
        assert joint[doc_id] == pytest.approx(score, rel=1e-12)


def test_a_word_common_in_the_history_counts_little_toward_coverage() -> None:
    index = BM25Index()
    for doc_id in range(20):
        index.add(doc_id, tokenize(f"so many things to do today, number {doc_id}"))
    index.add(100, tokenize("I've got three bikes: a road bike, a mountain bike and a commuter bike."))
    coverage = index.coverage(tokenize("How many bikes do I own?"))
    assert coverage[100] > 0.5
    assert coverage[3] < 0.2
    assert index.coverage(tokenize("bikes many own"))[100] == pytest.approx(coverage[100])


def test_the_words_a_history_never_used_are_counted_on_the_coverage_scale_numbers_left_out() -> None:
    index = BM25Index()
    for doc_id in range(20):
        index.add(doc_id, tokenize(f"so many things I want to learn today, number {doc_id}"))
    query = tokenize("I want to learn the ukulele by 2030")
    share, words = unheard(query, index.collection(query))
    assert words == {"ukulel"}  # "2030" is a value, not a word of its subject
    weights = information(query, index.collection(query))
    assert share == pytest.approx(weights["ukulel"] / sum(weights.values()))
    assert unheard(tokenize("learn today"), index.collection(tokenize("learn today"))) == (0.0, frozenset())


def test_the_answer_in_one_of_fifty_sessions_is_found_among_look_alike_sessions() -> None:
    store = InMemoryStore()
    sessions = {f"chat-{n}": [*FILLER, ("user", f"How many steps did I walk on day {n}?")] for n in range(50)}
    sessions["chat-bikes"] = [
        ("user", "Speaking of my bikes, I've got three of them: road, mountain, commuter.")
    ]
    user_history(store, sessions)
    recall = Recall()
    result = recall.search(
        "new",
        "How many bikes do I own?",
        store=store,
        max_tokens=200,
        counter=COUNTER,
        other_sessions=list(sessions),
    )
    assert result.items and result.items[0].session_id == "chat-bikes"
    assert "three of them" in result.text


# -- passages of long messages ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_passages_cover_a_long_text_in_order_without_gaps(seed: int) -> None:
    rng = random.Random(seed)
    sentences = [
        " ".join(rng.choices(["alpha", "beta", "gamma", "delta", "epsilon"], k=rng.randint(3, 30))) + "."
        for _ in range(80)
    ]
    text = "\n\n".join(" ".join(sentences[i : i + 4]) for i in range(0, 80, 4))
    spans = passage_spans(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert all(end - start <= PASSAGE_CHARS * 3 // 2 for start, end in spans[:-1])
    assert len(spans) > 1


def test_a_text_that_is_not_long_is_one_passage() -> None:
    text = "word " * (LONG_MESSAGE_CHARS // 5)
    assert passage_spans(text[:LONG_MESSAGE_CHARS]) == [(0, LONG_MESSAGE_CHARS)]


def test_an_excerpt_says_where_it_was_cut() -> None:
    text = "First part. Middle part. Last part."
    assert excerpt_text(text, (12, 24)) == "…Middle part.…"
    assert excerpt_text(text, (0, 11)) == "First part.…"
    assert excerpt_text(text, (0, len(text))) == text


def test_a_long_message_is_recalled_by_the_passage_that_matched_marked_as_an_excerpt() -> None:
    store = InMemoryStore()
    answer = long_answer("For your cocktail bar, add a bottle of absinthe for the Sazerac rinse.")
    assert len(answer) > 2 * LONG_MESSAGE_CHARS
    store_messages(store, "s1", [("user", "Help me stock a cocktail bar."), ("assistant", answer), *FILLER])
    result = Recall().search(
        "s1",
        "Which bottle did you say the Sazerac rinse needs?",
        store=store,
        max_tokens=300,
        counter=COUNTER,
    )
    excerpts = [item for item in result.items if item.excerpt]
    assert excerpts and "absinthe" in excerpts[0].text
    assert "Assistant (excerpt): …" in excerpts[0].text
    assert COUNTER.count_text(excerpts[0].text) < COUNTER.count_text(answer) // 4


def test_a_long_turn_does_not_eat_the_recall_room() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "I keep my old sneakers in a shoe rack in my closet."),
            ("assistant", long_answer("Sneakers last longer in a closet rack, away from sun.")),
            *FILLER,
        ],
    )
    result = Recall().search(
        "s1",
        "Where do I keep my old sneakers, in a closet rack?",
        store=store,
        max_tokens=250,
        counter=COUNTER,
    )
    texts = "\n".join(item.text for item in result.items)
    assert "shoe rack in my closet" in texts
    assert "away from sun" in texts


# -- the user's own words ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "about_user"),
    [
        ("How many bikes do I own?", True),
        ("What book am I currently reading?", True),
        ("我的狗叫什么名字？", True),
        ("You suggested a few cocktails; which had absinthe?", False),
        ("What did you recommend I read next?", False),
        ("What is the capital of Peru?", False),
    ],
)
def test_questions_about_the_user_are_told_apart(query: str, about_user: bool) -> None:
    assert asks_about_user(query) is about_user


def test_a_question_about_the_user_ranks_their_own_statement_first() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "I ride my road bike to work most days."),
            # A better keyword match than the user's own line, and nothing about the user.
            ("assistant", "Which road bike to ride to work? Ride a road bike with fenders to work."),
            *FILLER,
        ],
    )
    result = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", "Which road bike do I ride to work?", store=store, max_tokens=30, counter=COUNTER
    )
    assert [item.text.splitlines()[-1] for item in result.items] == [
        "User: I ride my road bike to work most days."
    ]


# -- no memory for a request that needs none ---------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "refers"),
    [
        ("How many bikes do I own?", True),
        ("What did we talk about last week?", True),
        ("When did Caroline go to the support group?", True),
        ("Translate 'good morning' into French.", False),
        ("What is 17 times 23?", False),
        ("Give me a synonym for 'happy'.", False),
        ("What did Mel and her kids paint?", True),  # a short form of Melanie, written as a name
        ("Which mellow songs suit a party?", False),  # the same letters, not a name
        ("What car should one buy?", False),
        # the first person of a request's frame asks; it is not what the request is about
        ("I need a cron expression that runs every weekday at noon.", False),
        ("I'd like a limerick about a sleepy cat.", False),
        ("I need a gift idea for my mom.", True),
        ("I need help with my cover letter.", True),
        ("帮我把这段话改得更正式一点。", False),
        ("我需要一个三天的健身计划。", False),
        ("我需要多喝水吗？", True),
        # "do you say" asks how it is said; "did you say" asks what was said
        ("How do you pronounce 'quinoa'?", False),
        ("What did you say about quinoa?", True),
        # the first person of a simile, or of the text a request works on, is not the user
        ("Explain compound interest like I'm ten.", False),
        ("Translate 'I lost my keys' into German.", False),
        ("把这句话翻译成英文：我下周去上海。", False),
        ("What's my sister's name?", True),
        ("一杯等于多少毫升？", False),
        # asking advice, or a short aside before a request, is not asking about oneself
        ("How many minutes should I steam broccoli?", False),
        ("Can I freeze cooked rice?", False),
        ("I'm curious, explain how tides work.", False),
        ("Do I have any allergies?", True),
        ("Where can I find my old tax forms?", True),
        # nor is the asker of instructions, or of a wish to learn; a question about the wish is
        ("I want to learn to knit, where do I begin?", False),
        ("I'd love to understand how vaccines work.", False),
        ("How do I make cold brew at home?", False),
        ("我想学游泳，怎么开始？", False),
        ("I'm trying to learn chess openings, any tips?", False),
        ("I'd love to hear a joke about penguins.", False),
        ("I was wondering how magnets work.", False),
        ("I'd love to see my photos from Rome again.", True),
        ("I need the name of that hotel again.", True),
        ("What do I want to learn next?", True),
        ("I'm trying to understand why my code fails.", True),
        ("Where do I work?", True),
        ("How do I get to my office from here?", True),
        ("我想知道我的快递到哪了。", True),
        ("那次你帮我写的简历还在吗？", True),
        # a numeral after a noun that numbers things is not the user; the pronoun after it is
        ("Summarize the causes of World War I in a few sentences.", False),
        ("What are the symptoms of Type I diabetes?", False),
        ("What did I say after the war I fought in?", True),
        ("I finished Part I of the course, what is in Part II?", True),
        # "before" that orders two things is not "earlier"
        ("Give me a quick warm-up routine before lifting weights.", False),
        ("What should I eat before a long run?", False),
        ("Have we talked about this before?", True),
        ("As I said before, which wine goes with fish?", True),
        # nor does "before" that a clause to come follows; one in the past does
        ("What should a kid know before they ride a bike alone?", False),
        ("What should a beginner check before it rains on a hike?", False),
        ("Are the shops open before we land?", False),
        ("How long can soup sit out before it's unsafe?", False),
        ("Was the weather nice before we moved?", True),
        ("Is it the same plan as before she got the job?", True),
        # "before" a thing or a day orders two things; ending a clause or before "then", it is earlier
        ("How were houses heated before radiators?", False),
        ("What should I bake before Christmas?", False),
        ("Did we cover this topic before, in class?", True),
        ("Which name had we picked before then?", True),
    ],
)
def test_requests_that_refer_to_the_history_are_told_apart(query: str, refers: bool) -> None:
    assert refers_to_history(query, ["caroline", "melanie"]) is refers


def test_a_request_that_needs_no_memory_recalls_nothing_and_says_why() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "I took French lessons in the morning before work."),
            ("assistant", "Good for you!"),
            *FILLER,
        ],
    )
    result = Recall().search(
        "s1", "Translate 'good morning' into French.", store=store, max_tokens=400, counter=COUNTER
    )
    assert result.items == ()
    assert result.reason.startswith("nothing recalled")
    assert "informative words" in result.reason


def test_a_question_about_the_user_with_evidence_recalls_it_and_says_why() -> None:
    store = InMemoryStore()
    store_messages(store, "s1", [("user", "I took French lessons in the morning before work."), *FILLER])
    result = Recall().search(
        "s1", "When did I take my French lessons?", store=store, max_tokens=400, counter=COUNTER
    )
    assert "French lessons" in result.text
    assert result.reason.startswith("recalled")


def test_a_new_chat_asking_for_no_memory_gets_the_room_for_nothing_else() -> None:
    store = InMemoryStore()
    old = ConversationMemory("old", store, user_id="ada")
    old.add_turn("My dog Duoduo loves the park.", "Lovely!")
    for (_, question), (_, answer) in zip(FILLER[::2], FILLER[1::2], strict=True):
        old.add_turn(question, answer)
    fresh = ConversationMemory("new", store, user_id="ada")
    context = fresh.build_context("Write a haiku about autumn rain.", 1024)
    assert context.recalled == ()
    assert context.section("recall").tokens == 0


def test_a_sentence_with_one_informative_word_is_not_recalled_for_holding_it() -> None:
    # "What about today?": "today" is its one informative word, and an earlier message
    # holds it by chance; "Who is Anthony?" asks about someone the history names. No
    # model: the words are all the gate has.
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "Today I finally fixed the leaking kitchen tap."),
            ("assistant", "Nice work!"),
            ("user", "Anthony from the climbing gym lent me his wrench."),
            ("user", "The bus came 3 times late this week: at 17 past, then 23 past the hour."),
            *FILLER,
        ],
    )
    recall = Recall()
    aside = recall.search("s1", "What about today?", store=store, max_tokens=400, counter=COUNTER)
    assert aside.items == ()
    assert "one informative word" in aside.reason
    # its numbers are values: "times" is the one word it has
    arithmetic = recall.search("s1", "What is 17 times 23?", store=store, max_tokens=400, counter=COUNTER)
    assert arithmetic.items == ()
    keyword = recall.search("s1", "today", store=store, max_tokens=400, counter=COUNTER)
    assert any("leaking kitchen tap" in item.text for item in keyword.items)
    # a thing named as known ("the wrench") is searched for by its word
    known = recall.search("s1", "Where is the wrench?", store=store, max_tokens=400, counter=COUNTER)
    assert any("lent me his wrench" in item.text for item in known.items)
    person = recall.search("s1", "Who is Anthony?", store=store, max_tokens=400, counter=COUNTER)
    assert any("climbing gym" in item.text for item in person.items)
    unknown = recall.search("s1", "Who is Beatrice?", store=store, max_tokens=400, counter=COUNTER)
    assert unknown.items == ()


def test_a_standalone_request_recalls_only_what_is_evidence_and_its_exchange() -> None:
    # One earlier exchange continues the request's subject; other messages share one of
    # its words. No model: each recalled message must hold most of its words, or answer one that does.
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "What causes the northern lights to glow green?"),
            ("assistant", "Oxygen high in the atmosphere, hit by solar particles, glows green."),
            ("user", "The kitchen lights flicker every evening."),
            ("user", "We drove north to see the northern coast last summer."),
            ("user", "Green tea or black tea before a run?"),
            *FILLER,
        ],
    )
    result = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", "What causes the northern lights?", store=store, max_tokens=600, counter=COUNTER
    )
    texts = " ".join(item.text for item in result.items)
    assert "glow green?" in texts
    assert "Oxygen high in the atmosphere" in texts
    assert "kitchen lights" not in texts
    assert "northern coast" not in texts
    # keywords searched for keep every match
    keywords = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", "northern lights", store=store, max_tokens=600, counter=COUNTER
    )
    assert "kitchen lights" in " ".join(item.text for item in keywords.items)


def test_small_talk_recalls_nothing_unless_it_refers_to_the_history() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "Good evening! I hope the move went well, I was doing boxes all day."),
            ("user", "好久不见，最近工作怎么样？我换了新工作。"),
            *FILLER,
        ],
    )
    recall = Recall()
    for query in ("Good evening! Hope you're doing well.", "Hi! How are you today?", "你好，最近怎么样？"):
        result = recall.search("s1", query, store=store, max_tokens=400, counter=COUNTER)
        assert result.items == (), query
        assert "small talk" in result.reason or "no earlier message matches" in result.reason
    evening = recall.search(
        "s1", "Good evening! Hope you're doing well.", store=store, max_tokens=400, counter=COUNTER
    )
    assert "small talk" in evening.reason  # its words are all in the first message
    asked = recall.search(
        "s1", "Good evening! How did my move go?", store=store, max_tokens=400, counter=COUNTER
    )
    assert any("move went well" in item.text for item in asked.items)


@pytest.mark.parametrize(
    ("query", "small_talk"),
    [
        ("Hi! How are you today?", True),
        ("Good evening! Hope you're doing well.", True),
        ("Hi there! Hope your day is going well.", True),
        ("Thanks, have a great evening!", True),
        ("Have a great day at the conference. What should I wear?", False),
        ("Hey, how's it going?", True),
        ("Thanks so much!", True),
        ("你好，最近怎么样？", True),
        ("好久不见！", True),
        # acknowledging an answer
        ("Great, that makes sense. Thanks!", True),
        ("That was super useful.", True),
        ("明白了，谢谢！", True),
        ("That helps, now explain recursion.", False),
        ("Is it useful to learn Latin?", False),
        ("Hi! How do I reset my router?", False),
        ("How are you doing with the move?", False),
        ("早上好！今天有什么新闻吗？", False),
    ],
)
def test_small_talk_is_told_from_a_request(query: str, small_talk: bool) -> None:
    assert is_small_talk(query) is small_talk


@pytest.mark.parametrize(
    ("query", "only"),
    [
        ("I have a job interview tomorrow, any general tips?", True),
        ("I love hiking.", True),
        ("我喜欢猫。", True),
        ("What food do I like best?", False),  # a question about the user
        ("Where is my passport?", False),
        ("What is the name of the playlist I created?", False),  # a question for a fact of theirs
        ("I went to Paris last year, what should I see now?", False),  # points at the history
        ("Did Caroline like the book I lent her?", False),  # names a speaker
        ("我明天要面试，有什么建议吗？", True),  # what it asks (its last clause) has no 我 in it
        ("我上次买的书叫什么？", False),  # a Chinese question with 我 in what it asks
        ("I just got a new puppy, how often should it eat?", True),  # asks of the puppy
        ("I'm going hiking this weekend, what should I pack?", True),  # asks for advice
        ("I went hiking. Which trail did I like most?", False),  # asks about the user
        ("Can you suggest activities that I can do in the evening?", True),
        ("Translate 'good morning' into French.", False),  # not about the user at all
        # "my" in the situation it tells, not in what it asks
        ("My sister is turning 30, what's a fun party theme?", True),
        ("I've been stuck with my paintings lately. Any ideas?", True),
        ("我的电脑很慢，有什么办法吗？", True),
        ("My sister is turning 30, what did I get her last year?", False),  # asked about the user
        ("Can you suggest a gift for my sister?", False),  # "my" in what it asks
        ("What brand are my running shoes?", False),
        # the first person as the one who will act on the answer, not a fact of theirs
        ("I'm flying to Tokyo, what are some phrases I should learn?", True),
        ("What is the phrase I learned in Tokyo?", False),
        # a day or a month to come is not the history's; one gone by is
        ("I have an exam next Monday, any study tips?", True),
        ("My essay is due Friday, any tips on structure?", True),
        ("I ran a race on Sunday, any tips for recovery?", False),
        ("I'm hosting a dinner party on Saturday, can you suggest an easy dessert?", True),  # a plan
        ("I hosted a dinner party on Saturday, any tips for the leftovers?", False),
        # the cause of what a thing of theirs does, asked of what the model knows
        ("I'm baking bread for the first time, why didn't my dough rise?", True),
        ("How come my phone battery drains so fast?", True),
        ("Why did I quit my old job?", False),  # why the user did something: theirs to have told
        # "when" that tells the situation is not a question for a fact
        ("My car makes a squeaking noise when I brake, is that serious?", True),
        ("My car makes a noise, when did I last service it?", False),
        # a piece of writing asked for: its first person is in the brief
        ("Write a thank-you note to a neighbor who watered my plants.", True),
        ("Can you draft a toast for my sister's wedding?", True),
        ("Write a summary of what I told you last session.", False),  # points at the history
        # a request's first person is in the brief of what it asks for, unless it asks for
        # what was said
        ("Help me name my new sourdough bakery.", True),
        ("Fix the grammar in my cover letter.", True),
        ("Tell me again what my sister's name is.", False),
        ("Recommend a restaurant I'd like, based on what you know about me.", False),
        # what the user will do when, before or if, is the circumstance of what is asked;
        # what they did is what is asked
        ("What should I eat before I go for a long swim?", True),
        ("How much water should I drink when I run in the heat?", True),
        ("What did I eat before I saw the doctor?", False),
        ("Where was I when I lost my keys?", False),
    ],
)
def test_a_query_about_the_user_only_by_its_first_person_is_told_apart(query: str, only: bool) -> None:
    assert personal_reading(query, ["caroline"])[1] is only


def test_a_request_about_the_user_only_in_passing_recalls_what_they_said_not_every_long_answer() -> None:
    # "I'm going hiking this weekend, what should I pack?": what the user said of hiking
    # is memory worth its tokens; an old answer about packing for a beach is not, though
    # it shares a word, unless it holds much of the request itself.
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "My knees hurt on steep hiking descents last weekend."),
            ("assistant", "Poles and shorter steps take load off the knees on the way down."),
            ("user", "Any ideas for a beach holiday?"),
            ("assistant", "Pack sunscreen, a hat and a book, and take a cooler for the drinks."),
            *FILLER,
        ],
    )
    query = "I'm going hiking this weekend, what should I pack?"
    assert personal_reading(query)[1]
    result = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", query, store=store, max_tokens=600, counter=COUNTER
    )
    texts = " ".join(item.text for item in result.items)
    assert "knees hurt on steep hiking" in texts
    assert "Poles and shorter steps" in texts  # the answer to a message that is evidence
    assert "sunscreen" not in texts
    # this short history never says "going": of the user's messages, only those that are
    # evidence themselves (see the ukulele test below)
    assert "never mentions 'going'" in result.reason
    # asked about the user by its first person alone, the same words recall the best match
    # and its exchange, not every message that shares one word with the question
    asked = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", "What should I pack, given my hiking plans?", store=store, max_tokens=600, counter=COUNTER
    )
    texts = " ".join(item.text for item in asked.items)
    assert "knees hurt on steep hiking" in texts and "Poles and shorter steps" in texts
    assert "sunscreen" not in texts
    assert "only the best match" in asked.reason


NERVOUS = [
    ("user", "I always get nervous before job interviews."),
    ("assistant", "Practise your answers out loud the day before."),
    ("user", "My first car was a red hatchback."),
    ("assistant", "A classic!"),
    ("user", "I was so nervous on my wedding day."),
    ("assistant", "That is very common, and it went well in the end!"),
]


def test_a_question_about_the_user_by_its_first_person_alone_recalls_what_holds_it() -> None:
    # "...how should I pace myself?" reads as a question about the user; messages that share
    # one of its words are not all its memory: the best match comes with its exchange, and
    # once the user has said something that holds much of it, what they said comes too.
    store = InMemoryStore()
    store_messages(store, "s1", [*NERVOUS, *FILLER])
    query = "I'm nervous about my first marathon, how should I pace myself?"
    assert personal_reading(query) == (True, False) and not points_at_history(query)
    recall = Recall(config=RecallConfig(relevance_floor=0.0))
    result = recall.search("s1", query, store=store, max_tokens=800, counter=COUNTER)
    texts = " ".join(item.text for item in result.items)
    assert "red hatchback" in texts and "A classic!" in texts  # the best match and its answer
    assert "job interviews" not in texts and "wedding day" not in texts
    assert "only the best match" in result.reason
    store_messages(
        store, "s1", [("user", "My first marathon is in May, I run 40 km a week."), ("assistant", "Great!")]
    )
    result = recall.search("s1", query, store=store, max_tokens=800, counter=COUNTER)
    texts = " ".join(item.text for item in result.items)
    assert "first marathon is in May" in texts
    assert "job interviews" in texts and "wedding day" in texts  # every match of the user
    assert "the user's own messages" in result.reason
    # pointed at the history, the same question recalls every match as before
    asked = "What did I tell you about being nervous before job interviews?"
    assert points_at_history(asked)
    pointed = recall.search("s1", asked, store=store, max_tokens=800, counter=COUNTER)
    assert "wedding day" in " ".join(item.text for item in pointed.items)


@pytest.mark.parametrize(
    ("query", "pointed"),
    [
        ("When was the printing press invented?", False),
        ("Who was the first emperor of Rome?", False),
        ("How did the ancient Egyptians move such heavy stones?", False),
        # a clause in the passive after "before" tells of the world, not of the history
        ("What did farmers use before they were invented?", False),
        ("What did we cook before the oven was repaired?", True),
        ("When did I buy my printer?", True),
        ("What was the name of the hotel you found?", True),
        ("Where did we leave off with the budget?", True),
        ("What was the book about dragons? Remind me.", True),
    ],
)
def test_a_question_put_in_the_past_points_at_the_history_with_someone_of_the_conversation(
    query: str, pointed: bool
) -> None:
    assert points_at_history(query)  # by its tense
    assert points_at_history(query, by_tense=False) is pointed


@pytest.mark.parametrize(
    ("query", "pointed"),
    [
        ("What caused the 2008 financial crisis?", False),
        ("Which team won the 1998 World Cup?", False),
        ("Where did we go on holiday in 2019?", True),
        ("What did I pay for rent in 2021?", True),
        ("Which car did you recommend to me in 2023?", True),
    ],
)
def test_a_year_points_at_the_history_with_someone_of_the_conversation(query: str, pointed: bool) -> None:
    # like a question put in the past: "the 2008 financial crisis" is the world's year
    assert points_at_history(query)
    assert points_at_history(query, by_tense=False) is pointed


def test_a_speaker_named_in_a_question_put_in_the_past_points_at_the_history() -> None:
    query = "When did Caroline go to the support group?"
    assert not points_at_history(query, by_tense=False)
    assert points_at_history(query, ["caroline", "melanie"], by_tense=False)


WORDS_IN_PASSING = [
    ("user", "My grandfather invented a folding chair."),
    ("assistant", "What a clever man!"),
    ("user", "The new press at the gym is always busy."),
    ("assistant", "Try going early."),
    ("user", "I printed my boarding pass at the library."),
    ("assistant", "Handy!"),
]


def test_a_question_about_the_world_put_in_the_past_recalls_only_messages_holding_much_of_it() -> None:
    # "When was...invented?" reads as about the history by its tense alone: messages that
    # share one of its words each are not its memory, not even the best of them. Asked by
    # the user of themselves, the same words recall every match.
    store = InMemoryStore()
    store_messages(store, "s1", [*WORDS_IN_PASSING, *FILLER])
    recall = Recall(config=RecallConfig(relevance_floor=0.0))
    world = recall.search(
        "s1",
        "When was the first printing press invented in Europe?",
        store=store,
        max_tokens=800,
        counter=COUNTER,
    )
    assert world.items == ()
    assert "only its tense ties to the history needs a message holding 30% of its words" in world.reason
    # nor does one message that holds much of it bring every message of the user: what they
    # said does not answer a question about the world
    store_messages(
        store, "s1", [("user", "I saw a printing press from Europe in a museum."), ("assistant", "Fun!")]
    )
    world = recall.search(
        "s1",
        "When was the first printing press invented in Europe?",
        store=store,
        max_tokens=800,
        counter=COUNTER,
    )
    texts = " ".join(item.text for item in world.items)
    assert "in a museum" in texts and "Fun!" in texts
    assert "folding chair" not in texts and "gym is always busy" not in texts
    own = recall.search(
        "s1", "When did I first see a printing press in Europe?", store=store, max_tokens=800, counter=COUNTER
    )
    texts = " ".join(item.text for item in own.items)
    assert "gym is always busy" in texts and "boarding pass" in texts


ONE_WORD_EACH = [
    ("user", "My new ottoman footstool arrived today."),
    ("assistant", "Enjoy putting your feet up!"),
    ("user", "The Galactic Empire is my favourite set of villains."),
    ("assistant", "A classic choice."),
    ("user", "My sourdough starter seems to collapse overnight."),
    ("assistant", "Feed it a little more often."),
]


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_one_word_in_common_with_a_question_of_three_is_not_much_of_it(
    store_kind: str, tmp_path: Path
) -> None:
    # Each message shares one of the question's three words, a third of it, by chance: asked
    # by the user of themselves, only the best match comes, not all three; asked of the
    # world, none. A message holding two of its words is much of it: asked of the world, it
    # comes alone.
    store: Store = InMemoryStore() if store_kind == "memory" else SQLiteStore(tmp_path / "m.db")
    store_messages(store, "s1", [*ONE_WORD_EACH, *FILLER])
    recall = Recall(config=RecallConfig(relevance_floor=0.0))
    mine = "What do I think about the Ottoman Empire collapse?"
    world = "When did the Ottoman Empire collapse?"
    found = recall.search("s1", mine, store=store, max_tokens=800, counter=COUNTER)
    texts = " ".join(item.text for item in found.items)
    assert sum(word in texts for word in ("footstool", "Galactic", "sourdough")) == 1, found.items
    assert recall.search("s1", world, store=store, max_tokens=800, counter=COUNTER).items == ()
    store_messages(
        store, "s1", [("user", "We visited a museum about the Ottoman Empire."), ("assistant", "Lovely!")]
    )
    found = recall.search("s1", world, store=store, max_tokens=800, counter=COUNTER)
    texts = " ".join(item.text for item in found.items)
    assert "museum about the Ottoman Empire" in texts and "Lovely!" in texts
    assert not any(word in texts for word in ("footstool", "Galactic", "sourdough"))
    # the user has spoken of it: what else they said that shares its words comes too
    found = recall.search("s1", mine, store=store, max_tokens=800, counter=COUNTER)
    texts = " ".join(item.text for item in found.items)
    assert "museum about the Ottoman Empire" in texts and "footstool" in texts


# "know" in three messages of the user's, "GPS" in one answer: of "How does GPS know where
# I am?", the far commoner word carries less than 40% of what the question says.
KNOWS = [
    ("user", "I know a great taco place downtown."),
    ("assistant", "Nice, enjoy it!"),
    ("user", "Do you know any good podcasts about space?"),
    ("assistant", "Try a show about astronomy."),
    ("user", "I never know what to cook on Mondays."),
    ("assistant", "Plan the week ahead on Sunday."),
    ("user", "Plan a day hike for me."),
    ("assistant", "Bring water, a map and a GPS device."),
]


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
def test_of_two_words_the_commoner_alone_is_not_much_of_a_question(store_kind: str, tmp_path: Path) -> None:
    # Messages that share only "know" hold less than 40% of the question, by chance: they
    # are not recalled, nor, since they are the user's, every other match of the user's.
    # A message of the user's holding "GPS" holds more: they have spoken of it.
    store: Store = InMemoryStore() if store_kind == "memory" else SQLiteStore(tmp_path / "m.db")
    store_messages(store, "s1", [*KNOWS, *FILLER])
    recall = Recall(config=RecallConfig(relevance_floor=0.0))
    question = "How does GPS know where I am?"
    found = recall.search("s1", question, store=store, max_tokens=800, counter=COUNTER)
    texts = " ".join(item.text for item in found.items)
    assert "GPS device" in texts
    assert not any(word in texts for word in ("taco", "podcasts", "Mondays")), found.items
    assert "messages holding more than 40% of its two words" in found.reason
    store_messages(
        store,
        "s1",
        [("user", "My GPS keeps losing its signal in tunnels."), ("assistant", "That is normal.")],
    )
    found = recall.search("s1", question, store=store, max_tokens=800, counter=COUNTER)
    texts = " ".join(item.text for item in found.items)
    assert "tunnels" in texts and "taco" in texts, found.items


# Three bikes of the user's, and "many" in two answers: in a short history the two words of
# "How many bikes do I own?" are about as informative as each other.
BIKES = [
    ("user", "I ride my road bike to work every day."),
    ("assistant", "A fine way to start the day."),
    ("user", "My mountain bike needs new tyres."),
    ("assistant", "Check the tread before you buy."),
    ("user", "I bought a folding bike for train trips."),
    ("assistant", "Handy on trains."),
    ("user", "The gym was crowded today."),
    ("assistant", "There are too many people at six, go earlier."),
    ("user", "How should I train for a 10k?"),
    ("assistant", "Many short sessions beat a few long ones."),
]


def test_of_two_words_about_as_informative_either_alone_is_much_of_a_question() -> None:
    # Neither word is the far commoner: each message holding "bike" is evidence, and all
    # three bikes come, not only the best match.
    store = InMemoryStore()
    store_messages(store, "s1", [*BIKES, *FILLER])
    found = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", "How many bikes do I own?", store=store, max_tokens=800, counter=COUNTER
    )
    texts = " ".join(item.text for item in found.items)
    assert all(bike in texts for bike in ("road bike", "mountain bike", "folding bike")), found.items


def test_a_share_just_short_of_the_bar_does_not_read_as_the_bar() -> None:
    # "holds 15% (needs 15%)" for 14.7% reads as a contradiction: such a share shows a decimal
    store = InMemoryStore()
    marathon = [("user", "My first marathon is in May, I run 40 km a week."), ("assistant", "Great!")]
    store_messages(store, "s1", [*NERVOUS, *FILLER, *marathon])
    result = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1",
        "Last time I said I was nervous, what did you suggest?",
        store=store,
        max_tokens=800,
        counter=COUNTER,
    )
    assert result.items == ()
    assert re.search(r"holds 14\.\d% of the query's informative words \(needs 15%\)", result.reason), (
        result.reason
    )


# An old exchange that holds a request's words, and a message of the user sharing one word.
PUPPY_EXCHANGE = [
    ("user", "Tell me about dog nutrition."),
    (
        "assistant",
        "A puppy should eat three or four small meals a day until it is six months old; "
        "how often after that depends on the breed.",
    ),
]
PARKING = [
    ("user", "The new parking spot at work is great."),
    ("assistant", "Congratulations, that will save you time every morning."),
]
PUPPY_REQUEST = "I just got a new puppy, how often should it eat?"


def _recalled(store: InMemoryStore) -> tuple[str, str]:
    result = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", PUPPY_REQUEST, store=store, max_tokens=600, counter=COUNTER
    )
    return " ".join(item.text for item in result.items), result.reason


def test_a_request_about_the_user_in_passing_recalls_their_messages_only_when_one_is_evidence() -> None:
    # Only an old answer holds some of the request's words: the user has not spoken of its
    # subject, and what the answer said is knowledge the model has anyway.
    store = InMemoryStore()
    store_messages(store, "s1", [*PUPPY_EXCHANGE, *FILLER, *PARKING])
    assert personal_reading(PUPPY_REQUEST) == (True, True)
    texts, reason = _recalled(store)
    assert texts == ""
    assert "the evidence is only the assistant's" in reason
    # once the user has said something that is evidence, what they said is recalled, and
    # the answer that is evidence with its request; the request asks for help, not about
    # the user, so their message that shares only "new" with it is not
    store_messages(store, "s1", [("user", "I got a beagle puppy, she eats so fast."), ("assistant", "Cute!")])
    texts, reason = _recalled(store)
    assert "beagle" in texts
    assert "three or four small meals" in texts and "Tell me about dog nutrition" in texts
    assert "parking spot" not in texts and "ramen" not in texts
    assert "asks for help, not about the user" in reason


@pytest.mark.parametrize(
    "request_",
    [
        "I just got a puppy. Can you suggest a feeding schedule that would suit me?",
        "I just got a puppy. Recommend a feeding schedule that would suit me.",
    ],
    ids=["asks about them", "asks for a suggestion"],
)
def test_a_request_in_passing_that_asks_about_the_user_recalls_what_they_said(request_: str) -> None:
    # "...that would suit me?" asks about the user, and a request for a suggestion asks what
    # fits them: what they told of themselves answers it, their messages that are not
    # evidence on their own included (their work schedule).
    request = request_
    assert personal_reading(request) == (True, True)
    assert points_to_past(request) or asks_for_suggestions(request)
    store = InMemoryStore()
    told = [
        ("user", "I just got a beagle puppy and her feeding is chaos."),
        ("assistant", "I suggest a routine that will suit you both; I recommend two meals a day."),
    ]
    shifts = [("user", "My work schedule moved to early shifts."), ("assistant", "Early nights, then.")]
    store_messages(store, "s1", [*PUPPY_EXCHANGE, *FILLER, *told, *PARKING, *shifts])
    result = Recall(config=RecallConfig(relevance_floor=0.0)).search(
        "s1", request, store=store, max_tokens=600, counter=COUNTER
    )
    texts = " ".join(item.text for item in result.items)
    assert "beagle" in texts and "early shifts" in texts
    assert "only the user's own messages" in result.reason


@pytest.mark.parametrize("lexical_index", ["store", "process"])
def test_a_request_in_passing_about_what_the_history_never_mentions_recalls_no_chance_matches(
    tmp_path: Path, lexical_index: str
) -> None:
    # through the index the file keeps and through BM25 in the process (every other store:
    # test_user_scope.py)
    assert personal_reading(UKULELE) == (True, True)
    check_unheard_subject(SQLiteStore(tmp_path / "chat.db", lexical_index=lexical_index))


@pytest.mark.parametrize("lexical_index", ["store", "process"])
def test_a_returning_users_request_in_passing_wants_what_they_said_not_old_answers(
    tmp_path,
    lexical_index: str,  # type: ignore[no-untyped-def]
) -> None:
    # Across the sessions of a user in a SQLite file, through the index the file keeps
    # and through BM25 in the process: an old recipe that lists yellow peppers and cherry
    # tomatoes is not memory for the state of the user's tomato plants; once they have said
    # something of their plants, recall brings it.
    store = SQLiteStore(tmp_path / "chat.db", lexical_index=lexical_index)
    old = ConversationMemory("old", store, user_id="u")
    old.add_turn(
        "Give me a pasta recipe.",
        "Spaghetti with cherry tomatoes, a yellow bell pepper, basil leaves and garlic.",
    )
    for i in range(20):
        old.add_turn(f"Tell me about topic {i} in history.", f"Topic {i} is about kings and wars.")
    new = ConversationMemory("new", store, user_id="u")
    request = "My tomato plants have yellow leaves, what could be wrong?"
    recall = new.build_context(query=request, budget=2048).section("recall")
    assert recall.tokens == 0 and "the evidence is only the assistant's" in recall.note
    old.add_turn("My tomato plants are in pots on a north-facing balcony.", "Not much sun for tomatoes.")
    built = new.build_context(query=request, budget=2048)
    assert "north-facing balcony" in str(built.messages)


def test_an_answer_that_is_evidence_brings_its_request_not_the_next_message() -> None:
    # An old answer holding every word of the request answered it before: it is recalled,
    # with the message that asked for it.
    answered = (
        "assistant",
        "You just got a new puppy? It should eat three or four small meals a day; how often "
        "after six months depends on the breed.",
    )
    store = InMemoryStore()
    store_messages(store, "s1", [PUPPY_EXCHANGE[0], answered, *PARKING, *FILLER])
    texts, reason = _recalled(store)
    assert "Tell me about dog nutrition" in texts and "three or four small meals" in texts
    assert "parking spot" not in texts  # the next message asks something else
    assert "none of them the user's" in reason


def test_the_gate_can_be_turned_off() -> None:
    store = InMemoryStore()
    store_messages(store, "s1", [("user", "I took French lessons in the morning before work."), *FILLER])
    result = Recall(config=RecallConfig(min_coverage=None)).search(
        "s1", "Translate 'good morning' into French.", store=store, max_tokens=400, counter=COUNTER
    )
    assert "French lessons" in result.text


@pytest.mark.parametrize(
    "query",
    [
        "the of and to a in is it that",
        "😊🙏🎉👍",
        "where is my order " * 1112,
        "我的 dog 叫什么 name? Где мой заказ?",
    ],
    ids=["stop words", "emoji", "20,000 characters", "mixed scripts"],
)
def test_a_hostile_query_from_a_new_chat_gets_a_valid_context(query: str) -> None:
    store = InMemoryStore()
    for number in range(5):
        old = ConversationMemory(f"old-{number}", store, user_id="ada")
        old.add_turn(
            f"My order {number} is the blue lamp; 我的狗叫多多.", long_answer("Your lamp ships Monday.")
        )
    fresh = ConversationMemory("new", store, user_id="ada")
    # A huge query only steers recall (frameworks add the user's input themselves).
    context = fresh.build_context(query, 1024, include_query=len(query) < 1000)
    assert context.token_count <= context.budget
    assert context.messages


class EnglishOnly(BaseEmbedder):
    """Like an English-only sentence encoder: English words hash into a space of their own,
    and every Chinese line lands near one point that every query is somewhat similar to."""

    _name = "english-only-test"
    dimension = 96

    def _embed(self, texts: list[str], *, query: bool) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            if has_cjk(text):
                row[64] = 1.0
                row[65 + sum(map(ord, text)) % 31] = 0.3
                continue
            for word in tokenize(text):
                row[sum(map(ord, word)) % 64] += 1.0
            row[64] = 0.4 * float(np.linalg.norm(row[:64]) or 1.0)
        return rows


def test_an_english_question_does_not_recall_chinese_lines_an_english_only_model_puts_near_it() -> None:
    store = InMemoryStore()
    lines = [
        "我养了一只狗，名字叫多多。",
        "周末我常去西湖边散步。",
        "我最近在学做红烧肉。",
        "明天去上海的高铁几点出发？",
    ]
    store_messages(store, "s1", [("user", text) for text in lines] + FILLER)
    recall = Recall(EnglishOnly())
    recall.catch_up("s1", store)
    for query in ("What is the capital of Peru?", "Write a haiku about the sea."):
        result = recall.search("s1", query, store=store, max_tokens=300, counter=COUNTER)
        assert not any(has_cjk(item.text) for item in result.items), query
    asked = recall.search("s1", "How many ounces are in a cup?", store=store, max_tokens=300, counter=COUNTER)
    assert any("eight fluid ounces" in item.text for item in asked.items)


def test_memories_of_one_store_can_share_one_lexical_recall() -> None:
    from convmem._recall.shared import shared_lexical_recall

    store, other = InMemoryStore(), InMemoryStore()
    assert shared_lexical_recall(store) is shared_lexical_recall(store)
    assert shared_lexical_recall(store) is not shared_lexical_recall(other)
    recall = shared_lexical_recall(store)
    first = ConversationMemory("a", store, user_id="ada", recall=recall)
    first.add_turn("My locker code is K123.", "Noted.")
    second = ConversationMemory("b", store, user_id="ada", recall=recall)
    assert "K123" in second.build_context("What is my locker code?", 400).memory_text
    assert recall.stats("a", store=store)["messages"] == 2


def test_words_about_the_conversation_do_not_count_toward_coverage() -> None:
    index = BM25Index()
    index.add(1, tokenize("I've got three bikes."))
    index.add(2, tokenize("The weather was cold."))
    asked = index.coverage(tokenize("What did I say I told you about my bikes earlier?"))
    assert asked[1] == pytest.approx(index.coverage(tokenize("my bikes"))[1]) == pytest.approx(1.0)


@pytest.mark.parametrize("lexical_index", ["store", "process"])
def test_a_name_only_the_assistant_used_is_not_someone_of_the_users_history(
    tmp_path: Path, lexical_index: str
) -> None:
    # Through the index the file keeps and through BM25 in the process: an answer that
    # mentions Budapest does not make "Which river flows through Budapest?" a question
    # about the user's life; once the user has spoken of Budapest, it is.
    store = SQLiteStore(tmp_path / "chat.db", lexical_index=lexical_index)
    old = ConversationMemory("old", store, user_id="u")
    old.add_turn(
        "Plan me a week in central Europe.",
        "Start in Vienna, then two days in Budapest: the thermal baths, the castle district "
        "and a cruise on the river at night.",
    )
    for i in range(12):
        old.add_turn(f"Tell me about topic {i} in history.", f"Topic {i} is about kings and wars.")
    new = ConversationMemory("new", store, user_id="u")
    question = "Which river flows through Budapest?"
    assert past_cue(question) is not None and past_cue(question).reason == ASKS_ABOUT_A_PERSON
    recall = new.build_context(query=question, budget=2048).section("recall")
    assert recall.tokens == 0, recall.note
    old.add_turn("I booked the flight to Budapest for May!", "Enjoy the trip.")
    assert "flight to Budapest" in str(new.build_context(query=question, budget=2048).messages)
    # a name of several words is the user's only whole: their friend Miles is not Miles Davis
    old.add_turn("My friend Miles lent me his bike for the weekend.", "That was kind of him.")
    jazz = "What instrument did Miles Davis play?"
    assert past_cue(jazz) is not None and past_cue(jazz).reason == ASKS_ABOUT_A_PERSON
    assert "lent me his bike" not in str(new.build_context(query=jazz, budget=2048).messages)
    old.add_turn("I saw a Miles Davis tribute band last night.", "Sounds like a great night.")
    assert "tribute band" in str(new.build_context(query=jazz, budget=2048).messages)


def test_a_users_match_deleted_while_a_name_is_checked_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The user's matches are read for the name after they were ranked: one deleted in
    # between is not there to read, and the search goes on without it (it does not give
    # up on the file's index and read every log instead).
    from convmem._stores.sqlite.lexical import SQLiteHistoryTables

    store = SQLiteStore(tmp_path / "chat.db")
    old = ConversationMemory("old", store, user_id="u")
    old.add_turn("Plan me a week in central Europe.", "Start in Vienna, then two days in Budapest.")
    old.add_turn("I paddled down the river near my town.", "Sounds lovely.")
    new = ConversationMemory("new", store, user_id="u")
    monkeypatch.setattr(SQLiteHistoryTables, "messages", lambda self, history, keys: {})
    with caplog.at_level(logging.WARNING, logger="convmem"):
        built = new.build_context(query="Which river flows through Budapest?", budget=2048)
    assert built.section("recall").tokens == 0
    assert not [r for r in caplog.records if "reading the logs instead" in r.getMessage()]


def test_in_a_chat_of_two_people_a_name_either_used_is_someone_of_the_history() -> None:
    # Two friends chatting (the second stored as the assistant, by name): the friend who
    # is not the user spoke of Anthony.
    store = InMemoryStore()
    memory = ConversationMemory("chat", store, user_id="caroline")
    memory.add("user", "How was your weekend?", name="Caroline")
    memory.add("assistant", "Great, my cousin Anthony taught me to climb.", name="Melanie")
    for i in range(12):
        memory.add("user", f"Topic {i} is about kings and wars.", name="Caroline")
        memory.add("assistant", f"Indeed, topic {i} is.", name="Melanie")
    result = Recall().search("chat", "Who is Anthony?", store=store, max_tokens=400, counter=COUNTER)
    assert any("taught me to climb" in item.text for item in result.items)


def test_a_question_about_someone_the_history_names_is_about_the_history() -> None:
    store = InMemoryStore()
    store_messages(store, "s1", [("user", "Lola's vet visit cost $50 and the flea medicine $25."), *FILLER])
    found = Recall().search(
        "s1",
        "What is the total cost of Lola's check-up and medicine?",
        store=store,
        max_tokens=300,
        counter=COUNTER,
    )
    assert "Lola's vet visit" in found.text
    unknown = Recall().search(
        "s1",
        "What is the total cost of Max's check-up and medicine?",
        store=store,
        max_tokens=300,
        counter=COUNTER,
    )
    assert unknown.items == ()


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_words_only_about_the_talk_in_common_are_no_evidence(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # "tell" asks where to look ("tell me what I said"), so it is not counted toward what a
    # message holds of a query: a request that shares only it with the history holds
    # nothing of it. The keyword index kept in the SQLite file and the one in the process
    # must both say so (0 held), not that they cannot tell (which let every match through).
    store: Store = SQLiteStore(tmp_path / "memory.db") if kind == "sqlite" else InMemoryStore()
    old = ConversationMemory("old", store, user_id="ada")
    for question, answer in [
        ("Can you tell me more about sustainable aviation fuel?", "It is made from used cooking oil."),
        ("Tell me about the Sigma 24mm lens build quality.", "It has a metal barrel."),
        *zip([q for _, q in FILLER[::2]], [a for _, a in FILLER[1::2]], strict=True),
    ]:
        old.add_turn(question, answer)
    fresh = ConversationMemory("new", store, user_id="ada")
    riddle = fresh.build_context("I'm bored, tell me a riddle.", 1024)
    assert riddle.recalled == ()
    assert riddle.section("recall").tokens == 0
    lens = fresh.build_context("Tell me about my Sigma lens again.", 1024)
    assert any("Sigma 24mm" in item.text for item in lens.recalled)
    store.close()

"""The rule fact extractor's patterns, English and Chinese.

Each rule is a regex over one sentence and a small handler that turns a match
into ``(key, value)`` pairs, or into nothing when the match is not a fact
about the user ("I'm not sure", 我叫了外卖). The tables favour precision over
recall; :class:`~convmem._facts.RuleFactExtractor` runs them over the user's
sentences.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = [
    "EN_RULES",
    "TRIM_CHARS",
    "ZH_RULES",
    "Pairs",
    "Rule",
    "is_question",
    "pet_name_following",
    "rule_pairs",
    "trim_value",
]

TRIM_CHARS = " \t\r\n.,!?;:，。！？；：、…\"'“”‘’()（）[]【】「」『』《》~～"
"""Spaces, punctuation and quotes that never belong to the start or end of a value."""

Pairs = list[tuple[str, str]]
Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], Pairs]]

_QUESTION_END = re.compile(r"(?:[?？]|[吗么嘛][\W_]*)\s*$")
_HYPOTHETICAL = re.compile(
    r"(?i:\b(?:if|suppose|imagine|pretend|would|wish)\b)|如果|假如|要是|假设|假使|想象|但愿|希望"
)
_CAP_WORDS = r"[A-Z][A-Za-z'’-]*(?:\s+[A-Z][A-Za-z'’-]*){0,2}"
_ANY_WORDS = r"[A-Za-z][A-Za-z'’-]*(?:\s+[A-Za-z][A-Za-z'’-]*){0,2}"
_PLACE = r"(?:the\s+)?[A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|la|upon))*"
# Capitalized words that follow "I'm" without being a name.
_NOT_A_NAME = frozenset(
    """
    not so very just really also still here there back home done fine good ok okay sorry sure glad happy
    afraid tired busy ready new free single married pregnant vegan vegetarian american british english
    chinese canadian french german japanese korean indian australian italian spanish mexican russian
    brazilian dutch swiss irish scottish welsh christian muslim jewish catholic buddhist hindu atheist
    gay straight monday tuesday wednesday thursday friday saturday sunday today tomorrow tonight
    from in at on with going trying looking working living thinking planning the a an
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_NOT_A_PLACE = frozenset(
    ["a", "an", "my", "our", "his", "her", "their", "this", "that", "here", "there", "home", "i", "it"]
)
_NAME_TAIL_WORDS = frozenset(
    ["and", "but", "or", "so", "by", "from", "btw", "though", "too", "also", "now", "here"]
)
_EN_PRONOUN_OBJECTS = frozenset(
    """
    it that this these those you him her them us me what how when where why who which whom your his their
    our its there here one ones something anything everything nothing being having doing myself yourself
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_EN_OBJECT_STOP = re.compile(
    r"(?i)\s*(?:[.!?;:]|\b(?:but|because|since|though|although|when|whenever|if|while|so|as|than|over|more"
    r"|better|rather|very much|a lot|too|anymore|any more|nowadays|these days|lately"
    r"|especially|particularly|mostly|usually|often|sometimes|always|every)\b)"
)
_EN_ARTICLES = re.compile(r"(?i)^(?:a|an|the|my|some|all|most|good|to)\s+")
_SPECIES_EN = (
    r"dog|puppy|cat|kitten|rabbit|bunny|hamster|parrot|bird|fish|turtle|tortoise|guinea pig|snake|lizard"
    r"|horse|ferret|hedgehog|corgi|husky|poodle|labrador|golden retriever|beagle|bulldog|pug|chihuahua"
    r"|shiba inu|dachshund|terrier"
)
_SPECIES_CANONICAL = {"puppy": "dog", "kitten": "cat", "bunny": "rabbit"}
_PROFESSIONS_EN = (
    r"engineer|developer|programmer|designer|teacher|doctor|nurse|lawyer|student|manager|accountant|scientist"
    r"|researcher|writer|artist|chef|cook|pilot|architect|consultant|analyst|professor|dentist|pharmacist"
    r"|photographer|musician|driver|farmer|firefighter|police officer|journalist|editor|translator"
    r"|entrepreneur|founder|intern|nurse|therapist|librarian|mechanic|electrician|plumber|veterinarian"
)


def trim_value(value: str) -> str:
    """`value` without the spaces, punctuation and quotes around it."""
    return value.strip(TRIM_CHARS)


def _cut_name_tail(value: str) -> str:
    words = value.split()
    for index, word in enumerate(words):
        if word.lower() in _NAME_TAIL_WORDS:
            words = words[:index]
            break
    return trim_value(" ".join(words))


def _en_name(match: re.Match[str], *, check_common_words: bool = True) -> Pairs:
    name = _cut_name_tail(match.group(1))
    if not name or (check_common_words and name.split()[0].lower() in _NOT_A_NAME):
        return []
    if name.split()[0].lower() in ("not", "a", "an", "the", "secret", "irrelevant", "unknown"):
        return []
    return [("name", name)]


def _en_place(key: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        place = re.sub(r"^the\s+", "", trim_value(match.group(1)))
        place = re.sub(r"\s+(?:of|de|la|upon)$", "", place)
        if not place or place.split()[0].lower() in _NOT_A_PLACE:
            return []
        return [(key, place)]

    return handle


def _en_objects(text: str) -> list[str]:
    stop = _EN_OBJECT_STOP.search(text)
    text = text[: stop.start()] if stop else text
    objects = []
    for item in re.split(r"\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*&\s*", text):
        item = _EN_ARTICLES.sub("", trim_value(item)).strip()
        words = item.lower().split()
        if not words or len(words) > 4 or any(word in _EN_PRONOUN_OBJECTS for word in words):
            continue
        objects.append(" ".join(words))
    return objects


def _en_preference(value: str) -> Callable[[re.Match[str]], Pairs]:
    canonical = {
        "like": "likes",
        "enjoy": "likes",
        "love": "loves",
        "adore": "loves",
        "prefer": "prefers",
        "hate": "hates",
        "detest": "hates",
    }

    def handle(match: re.Match[str]) -> Pairs:
        verb = (match.groupdict().get("verb") or "").lower()
        said = canonical.get(verb, value) if value != "dislikes" else value
        wanted = match.group("object")
        if said == "prefers":  # "prefer tea to coffee": the preference is tea
            wanted = re.split(r"\s+to\s+", wanted, maxsplit=1)[0]
        return [(f"preference:{thing}", said) for thing in _en_objects(wanted)]

    return handle


def _en_pet(match: re.Match[str]) -> Pairs:
    species = match.group("species").lower()
    pairs = [("pet", _SPECIES_CANONICAL.get(species, species))]
    name = match.groupdict().get("name")
    if name:
        name = _cut_name_tail(name)
        if name and name.split()[0].lower() not in _NOT_A_NAME:
            pairs.append(("pet_name", name))
    return pairs


def _age(match: re.Match[str]) -> Pairs:
    age = _number(match.group(1))
    return [("age", str(age))] if age is not None and 0 < age < 130 else []


def _single(key: str, *, max_words: int = 6) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        value = trim_value(match.group(1))
        if not value or len(value.split()) > max_words:
            return []
        return [(key, value)]

    return handle


EN_RULES: list[Rule] = [
    (
        re.compile(r"(?i:\bmy\s+name(?:'s|\s+is)\s+)(" + _ANY_WORDS + ")"),
        lambda m: _en_name(m, check_common_words=False),
    ),
    (
        re.compile(
            r"(?i:\b(?:you\s+can\s+|please\s+|just\s+)?call\s+me\s+)(" + _CAP_WORDS + r")(?=\s*(?:$|[,.!;]))"
        ),
        _en_name,
    ),
    (
        re.compile(
            r"(?:^|(?<=[\s,]))(?i:i(?:'m|\s+am)\s+)([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"
            r"(?=\s*(?:$|[,.!;]|\band\b|\bfrom\b|\bby the way\b))"
        ),
        _en_name,
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:now\s+|currently\s+|still\s+|also\s+|actually\s+)?live\s+in\s+"
            r"|\bi(?:'m|\s+am)\s+(?:now\s+|currently\s+)?living\s+in\s+"
            r"|\bi(?:'ve|\s+have)?\s+(?:just\s+|recently\s+|finally\s+)?moved\s+to\s+)(" + _PLACE + ")"
        ),
        _en_place("city"),
    ),
    (
        re.compile(
            r"(?i:\bi(?:'m|\s+am)\s+(?:originally\s+)?from\s+|\bi\s+(?:originally\s+)?come\s+from\s+"
            r"|\bi\s+was\s+born\s+in\s+)(" + _PLACE + ")"
        ),
        _en_place("hometown"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:really\s+|also\s+|just\s+|absolutely\s+|do\s+|totally\s+|especially\s+)*"
            r"(?P<verb>like|love|adore|enjoy|prefer)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("likes"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:really\s+|just\s+|also\s+)*(?:don't|do\s+not|dont)\s+(?:really\s+)?"
            r"(?:like|love|enjoy)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("dislikes"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:really\s+|just\s+|absolutely\s+)*(?P<verb>hate|detest|can't\s+stand"
            r"|cannot\s+stand)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("hates"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:have|'ve\s+got|have\s+got|got|own|adopted)\s+(?:a|an|one)\s+"
            r"(?:little\s+|cute\s+|new\s+|young\s+|old\s+|big\s+|small\s+)?)"
            r"(?P<species>(?i:"
            + _SPECIES_EN
            + r"))(?:\s*,?\s*(?i:named|called)\s+(?P<name>"
            + _CAP_WORDS
            + "))?"
            r"(?=\W|$)"
        ),
        _en_pet,
    ),
    (
        re.compile(
            r"(?i:\bmy\s+(?:little\s+|new\s+|old\s+)?)(?P<species>(?i:" + _SPECIES_EN + r"))"
            r"(?i:(?:'s|’s)\s+name\s+is|\s+is\s+(?:named|called))\s+(?P<name>[A-Za-z][A-Za-z'’-]*)"
        ),
        _en_pet,
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:currently\s+|now\s+)?work\s+as\s+(?:an?\s+)?)([A-Za-z][A-Za-z -]{1,40}?)"
            r"(?=\s*(?:$|[,.!?;]|\b(?:at|in|for|and|but|since|now)\b))"
        ),
        _single("job", max_words=4),
    ),
    (
        re.compile(
            r"(?i:\bi(?:'m|\s+am)\s+(?:an?\s+)?)((?:[A-Za-z-]+\s+){0,2}(?i:" + _PROFESSIONS_EN + r"))"
            r"(?=\s*(?:$|[,.!?;]|\b(?:at|in|for|and|but|from)\b))"
        ),
        _single("job", max_words=4),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:currently\s+|now\s+)?work\s+(?:at|for)\s+)((?:the\s+)?[A-Z][\w&.'’-]*"
            r"(?:\s+[A-Z][\w&.'’-]*){0,3})"
        ),
        _single("employer"),
    ),
    (re.compile(r"(?i:\bi(?:'m|\s+am)\s+)(\d{1,3})(?i:\s*(?:years?|yrs?)[\s-]*old\b|\s*y/?o\b)"), _age),
    (re.compile(r"(?i:\bi\s+(?:just\s+)?turned\s+)(\d{1,3})\b"), _age),
    (re.compile(r"(?i:\bmy\s+birthday\s+is\s+(?:on\s+)?)([^,.!?;]{3,30})"), _single("birthday")),
]

# --- Chinese

_ZH_VALUE = r"([^\s，,。.！!？?；;：:、“”\"'‘’（）()【】《》~～]{1,24})"
_ZH_DIGITS = "零〇一二两三四五六七八九十百"
_ZH_NUMBER_VALUE = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}


def _number(text: str) -> int | None:
    """``"25"`` or ``"二十五"`` -> 25 (Chinese numerals up to 999)."""
    if text.isdigit():
        return int(text)
    total, current = 0, 0
    for char in text:
        if char in _ZH_NUMBER_VALUE:
            current = _ZH_NUMBER_VALUE[char]
        elif char == "十":
            total += (current or 1) * 10
            current = 0
        elif char == "百":
            total += (current or 1) * 100
            current = 0
        else:
            return None
    return total + current


def _cut_at(value: str, stops: Sequence[str], *, min_index: int = 1) -> str:
    """`value` up to the first stop phrase found at or after `min_index`."""
    end = len(value)
    for stop in stops:
        found = value.find(stop, min_index)
        if found != -1:
            end = min(end, found)
    for index, char in enumerate(value[:end]):
        if index >= min_index and char.isdigit():
            end = index
            break
    return value[:end]


_ZH_NAME_STOPS = (
    "今年",
    "来自",
    "住在",
    "目前",
    "现在",
    "喜欢",
    "是",
    "我",
    "的",
    "呢",
    "啊",
    "吧",
    "了",
    "哦",
    "啦",
    "在",
    "就",
    "也",
    "和",
    "岁",
    "今",
    "好了",
    "即可",
    "，",
)
_ZH_PLACE_STOPS = (
    "了",
    "去",
    "来",
    "工作",
    "生活",
    "上学",
    "读书",
    "已经",
    "好几",
    "快",
    "有",
    "的",
    "这边",
    "那边",
    "附近",
    "啦",
    "呢",
    "吧",
    "啊",
    "呀",
    "吗",
    "住",
    "跟",
    "一",
    "两",
    "三",
    "四",
    "五",
    "六",
    "七",
    "八",
    "九",
    "十",
    "几",
    "半",
    "以后",
    "之后",
    "这里",
    "那里",
    "定居",
    "发展",
    "打工",
    "上班",
)
_ZH_NOT_PLACES = (
    "家",
    "学校",
    "宿舍",
    "公司",
    "酒店",
    "宾馆",
    "这",
    "那",
    "附近",
    "隔壁",
    "楼",
    "一",
    "个",
    "哪",
    "外地",
    "本地",
    "当地",
    "什么",
    "乡下",
    "城里",
    "市区",
    "郊区",
    "国外",
    "海外",
    "老家",
    "同一",
)
_ZH_PREFERENCE_STOPS = (
    "了",
    "呢",
    "啊",
    "吧",
    "呀",
    "啦",
    "哦",
    "因为",
    "所以",
    "但是",
    "但",
    "不过",
    "而且",
    "也",
    "的时候",
    "得很",
    "得不得了",
    "得要命",
    "极了",
    "死了",
)
_ZH_NOT_OBJECTS = (
    "你",
    "您",
    "他",
    "她",
    "它",
    "这",
    "那",
    "什么",
    "哪",
    "的",
    "上",
    "死",
    "自己",
    "大家",
    "谁",
    "怎么",
    "着",
    "过",
)
_ZH_ANIMALS = (
    "狗",
    "犬",
    "猫",
    "兔",
    "鼠",
    "鹦鹉",
    "鸟",
    "鱼",
    "龟",
    "柯基",
    "金毛",
    "哈士奇",
    "泰迪",
    "柴犬",
    "布偶",
    "英短",
    "美短",
    "拉布拉多",
    "萨摩耶",
    "边牧",
    "比熊",
    "博美",
    "蛇",
    "蜥蜴",
    "刺猬",
    "貂",
)
_ZH_PET_CANONICAL = {
    "小狗": "狗",
    "狗狗": "狗",
    "小狗狗": "狗",
    "小猫": "猫",
    "猫咪": "猫",
    "小猫咪": "猫",
    "猫猫": "猫",
    "小兔子": "兔子",
    "兔兔": "兔子",
}
_ZH_JOB_SUFFIXES = (
    "师",
    "员",
    "生",
    "家",
    "工",
    "手",
    "长",
    "医生",
    "护士",
    "会计",
    "司机",
    "记者",
    "编辑",
    "警察",
    "经理",
    "总监",
    "老板",
    "创始人",
    "销售",
    "主播",
    "演员",
    "歌手",
    "翻译",
    "运营",
    "开发",
    "博士",
    "研究生",
    "律师",
    "老师",
    "教授",
    "厨师",
    "作家",
    "画家",
)
_ZH_NOT_JOBS = ("好", "坏", "新", "大", "小", "个", "一", "普通", "学", "男", "女", "老", "人")


def _zh_name(match: re.Match[str]) -> Pairs:
    name = trim_value(_cut_at(match.group(1), _ZH_NAME_STOPS, min_index=2))
    if re.fullmatch(r"[A-Za-z][A-Za-z'’.-]{0,30}", name):
        return [("name", name)]
    if not re.fullmatch(r"[\u4e00-\u9fff·]{2,4}", name) or name in ("什么", "啥名字", "名字"):
        return []
    return [("name", name)]


def _zh_place(key: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        place = trim_value(_cut_at(match.group(1), _ZH_PLACE_STOPS))
        if len(place) < 2 or place.startswith(_ZH_NOT_PLACES) or len(place) > 12:
            return []
        return [(key, place)]

    return handle


def _zh_preference(value: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        text = _cut_at(match.group(1), _ZH_PREFERENCE_STOPS)
        pairs = []
        for item in re.split(r"和|、|还有|以及|跟|与", text):
            item = trim_value(item)
            if not item or len(item) > 10 or item.startswith(_ZH_NOT_OBJECTS):
                continue
            pairs.append((f"preference:{item.lower()}", value))
        return pairs

    return handle


def _zh_species(text: str) -> str | None:
    species = trim_value(re.split(r"[，,。！？叫名它她他的]", text, maxsplit=1)[0])
    if not species or len(species) > 6 or not any(animal in species for animal in _ZH_ANIMALS):
        return None
    return _ZH_PET_CANONICAL.get(species, species)


def _zh_pet_name(text: str) -> str | None:
    name = trim_value(
        _cut_at(
            text, ("了", "呢", "啊", "吧", "哦", "啦", "，", "是", "今年", "很", "特别", "非常"), min_index=1
        )
    )
    if re.fullmatch(r"[\u4e00-\u9fff]{1,4}|[A-Za-z][A-Za-z'’-]{0,20}", name):
        return name
    return None


_ZH_PET_NAME_AFTER = re.compile(
    r"^[，,]?(?:它|牠|她|他)?(?:的名字)?(?:叫做|叫|名叫|名字叫|名字是)" + _ZH_VALUE
)
# A pet's name in the sentence after the one that introduced the pet.
_PET_NAME_FOLLOWING = re.compile(
    r"^(?:(?:它|牠|她|他)(?:的名字)?(?:叫做|叫|名叫|名字叫|名字是)" + _ZH_VALUE + ")"
    r"|^(?i:(?:its|his|her)\s+name\s+is\s+|(?:it|he|she)(?:'s|\s+is)\s+(?:called|named)\s+)([A-Za-z][A-Za-z'-]*)"
)


def _zh_pet_owned(match: re.Match[str]) -> Pairs:
    text = match.group(1)
    species = _zh_species(text)
    if species is None:
        return []
    pairs = [("pet", species)]
    species_end = len(re.split(r"[，,。！？叫名它她他的]", text, maxsplit=1)[0])
    name_match = _ZH_PET_NAME_AFTER.match(match.string[match.start(1) + species_end :])
    if name_match:
        name = _zh_pet_name(name_match.group(1))
        if name:
            pairs.append(("pet_name", name))
    return pairs


def _zh_pet_named(match: re.Match[str]) -> Pairs:
    species = _zh_species(match.group(1))
    name = _zh_pet_name(match.group(2))
    if species is None or name is None:
        return []
    return [("pet", species), ("pet_name", name)]


def _zh_job(match: re.Match[str]) -> Pairs:
    job = trim_value(match.group(1))
    if not (2 <= len(job) <= 10) or not job.endswith(_ZH_JOB_SUFFIXES) or job.startswith(_ZH_NOT_JOBS):
        return []
    return [("job", job)]


def _zh_workplace(match: re.Match[str]) -> Pairs:
    place = trim_value(match.group(1))
    if not (2 <= len(place) <= 15) or place.startswith(_ZH_NOT_PLACES):
        return []
    return [("workplace", place)]


_ZH_ADVERBS = "(?:也|还|很|最|特别|非常|真的|超|挺|比较|更|一直|都|蛮|好)*"
ZH_RULES: list[Rule] = [
    (
        re.compile(
            r"我叫(?!了|过|车|外卖|醒|人|他|她|你|它|一|个|出租|滴滴|快递|救护|什么|啥|做)" + _ZH_VALUE
        ),
        _zh_name,
    ),
    (re.compile(r"我(?:的名字|的中文名字?|的英文名字?)(?:是|叫)" + _ZH_VALUE), _zh_name),
    (re.compile(r"我名叫" + _ZH_VALUE), _zh_name),
    (re.compile(r"(?:^|[，,])(?:你|您|大家)?(?:可以|就)?叫我(?!一声|起床|去|来)" + _ZH_VALUE), _zh_name),
    (
        re.compile(r"我(?:现在|目前|如今|已经|一直|还|暂时)?(?:住在|居住在|生活在|定居在)" + _ZH_VALUE),
        _zh_place("city"),
    ),
    (
        re.compile(
            r"我(?:最近|刚刚|刚|已经|上个月|去年|今年|前不久)?搬(?:家)?(?:到了|到|去了|去)" + _ZH_VALUE
        ),
        _zh_place("city"),
    ),
    (re.compile(r"我(?:是|也是)?(?:来自|从)(?!哪)" + _ZH_VALUE + r"(?:来的)?"), _zh_place("hometown")),
    (re.compile(r"我(?:的)?老家(?:是|在)" + _ZH_VALUE), _zh_place("hometown")),
    (re.compile(r"我是([\u4e00-\u9fff]{2,6}?)人(?=[，,。.！!\s]|$)"), _zh_place("hometown")),
    (re.compile(r"我最喜欢的[^，。！？,.!?]{0,6}?是" + _ZH_VALUE), _zh_preference("likes")),
    (
        re.compile(r"我" + _ZH_ADVERBS + r"(?:喜欢|爱|热爱|偏爱)(?!上|过)" + _ZH_VALUE),
        _zh_preference("likes"),
    ),
    (re.compile(r"我" + _ZH_ADVERBS + r"(?:不喜欢|不爱|不太喜欢)" + _ZH_VALUE), _zh_preference("dislikes")),
    (re.compile(r"我" + _ZH_ADVERBS + r"(?:讨厌|受不了)" + _ZH_VALUE), _zh_preference("hates")),
    (
        re.compile(r"我(?:家)?(?:养了|养着|还养了|家里有|有)(?:一|两|三|几|\d)?(?:只|条|头|匹)" + _ZH_VALUE),
        _zh_pet_owned,
    ),
    (
        re.compile(
            r"我(?:的|家的|家)((?:小)?[\u4e00-\u9fff]{1,5}?)(?:的名字)?(?:叫做|叫|名叫|名字叫|名字是)"
            + _ZH_VALUE
        ),
        _zh_pet_named,
    ),
    (
        re.compile(
            r"我(?:今年|已经|才|都|现在)?([0-9]{1,3}|["
            + _ZH_DIGITS
            + r"]{1,4})(?:周)?岁(?!的时候|那年|时|之前|以前|以后)"
        ),
        _age,
    ),
    # "我叫小明，今年25岁": the age clause drops its subject, which is still the user.
    (
        re.compile(
            r"^我(?:叫|是|的名字是)[^，,。；;]{1,10}[，,]\s*(?:今年|已经|现在)?([0-9]{1,3}|["
            + _ZH_DIGITS
            + r"]{1,4})(?:周)?岁(?!的时候|那年|时|之前|以前|以后)"
        ),
        _age,
    ),
    (
        re.compile(r"我(?:现在|目前|一直)?在([^\s，,。.！!？?；;：:、]{2,15}?)(?:工作|上班|实习|任职)"),
        _zh_workplace,
    ),
    (
        re.compile(
            r"我(?:是一名|是一个|是个|是名|的职业是|的工作是|是做|是当)([\u4e00-\u9fffA-Za-z]{2,10}?)(?:的)?"
            r"(?=[，,。.！!\s]|$)"
        ),
        _zh_job,
    ),
    (re.compile(r"我的生日是" + _ZH_VALUE), _single("birthday")),
]


def is_question(sentence: str) -> bool:
    """Whether `sentence` asks rather than states ("Do I live in Paris?", 你知道我住在哪里吗)."""
    return bool(_QUESTION_END.search(sentence))


def pet_name_following(sentence: str) -> str | None:
    """The pet's name when `sentence` names the pet the previous sentence introduced
    ("It's called Max.", 它叫多多。), else ``None``."""
    following = _PET_NAME_FOLLOWING.match(sentence)
    return _zh_pet_name(following.group(1) or following.group(2)) if following else None


def rule_pairs(sentence: str, rules: Sequence[Rule]) -> Pairs:
    """The (key, value) pairs `rules` find in `sentence`, skipping hypothetical statements."""
    pairs: Pairs = []
    for pattern, handle in rules:
        for match in pattern.finditer(sentence):
            if _HYPOTHETICAL.search(sentence[: match.start()]):
                continue
            pairs.extend(handle(match))
    return pairs

"""The rule tables are built once per language: every memory opened makes a rule
extractor, and a table never changes after it is built."""

from __future__ import annotations

from convmem._derived.fact_rules import RuleTable
from convmem._derived.rule_extractor import RuleFactExtractor


def test_extractors_of_one_language_share_one_table() -> None:
    assert RuleFactExtractor("auto")._rules is RuleFactExtractor("auto")._rules
    assert RuleFactExtractor("en")._rules is RuleTable.for_language("en")


def test_each_language_has_its_own_table() -> None:
    english, chinese = RuleTable.for_language("en"), RuleTable.for_language("zh")
    assert english is not chinese
    assert english.find("My name is Alice.") == [("name", "Alice", False)]
    assert chinese.find("My name is Alice.") == []

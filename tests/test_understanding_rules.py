"""The rule machinery behind domains and features: tables, alternatives, folding, bounds."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app import ingest
from app.contract import ChatMessage, ChatRequest
from app.understanding.domains import DOMAIN_ORDER, detect_domain
from app.understanding.patterns import DOMAIN_TABLE
from app.understanding.rules import RuleSet, parse_rules, split_alternatives
from app.understanding.text import MAX_ANALYSED_CHARS, analysed, fold, prompt_text, strip_accents


def test_rule_tables_are_concatenated_in_order() -> None:
    rules = parse_rules("g r  ab\ng r  |cd\n# comment\ng s  e\nh r  f\n")
    assert rules == {"g": [("r", "ab|cd"), ("s", "e")], "h": [("r", "f")]}
    assert set(parse_rules(DOMAIN_TABLE)) == set(DOMAIN_ORDER)


def test_top_level_alternatives() -> None:
    assert split_alternatives(r"\ba(?:b|c)|[|)]d|\|e|[]|]f") == [
        r"\ba(?:b|c)",
        r"[|)]d",
        r"\|e",
        r"[]|]f",
    ]


def test_rule_sets_reject_what_they_cannot_match() -> None:
    with pytest.raises(ValueError, match="lower case"):
        RuleSet.build([("r", r"\bTraceback")])  # folded text has no capitals
    with pytest.raises(ValueError, match="capturing"):
        RuleSet.build([("r", r"\b(a|b)")])
    cased = RuleSet.build([("acronym", r"(?-i:\bROI\b)|\broi\s+soleil\b")])
    assert cased.hits("roi et roi soleil", "ROI et Roi Soleil") == ["acronym", "acronym"]


def test_long_prompts_are_read_by_head_and_tail() -> None:
    short = "a" * MAX_ANALYSED_CHARS
    assert analysed(short) is short
    middle = "zz " * 20_000
    long = "Traduis ceci en anglais : " + middle + " Fin."
    kept = analysed(long)
    assert len(kept) == MAX_ANALYSED_CHARS + 1
    assert kept.startswith("Traduis") and kept.endswith("Fin.")
    # an instruction buried in the middle of a 1 MB prompt is not read, the head is
    buried = "x " * 100_000 + "équation dérivée " + "y " * 400_000
    assert detect_domain(buried) is None
    match = detect_domain(long)
    assert match is not None and match.domain == "translation"


def test_folding() -> None:
    assert strip_accents("Équation dérivée, cœur, l’été") == "Equation derivee, coeur, l'ete"
    assert fold("ÉQUATION Straße") == "equation strasse"
    assert strip_accents("plain ascii") == "plain ascii"


def test_prompt_text_is_ingests_and_the_package_does_not_import_ingest() -> None:
    request = ChatRequest(
        request_id="r1",
        messages=[
            ChatMessage(role="system", content=""),
            ChatMessage(
                role="user", content=[{"type": "text", "text": "a"}, {"type": "image_url"}]
            ),
            ChatMessage(role="assistant", content=None),
            ChatMessage(role="user", content="b"),
        ],
    )
    assert prompt_text(request) == ingest.prompt_text(request) == "\na\n\nb"
    # ingest may import this package (to compute features at ingest) without a cycle
    code = "import app.understanding.features, app.understanding.guardrails, sys; "
    code += "assert 'app.ingest' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

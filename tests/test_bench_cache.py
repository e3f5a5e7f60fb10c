"""``switchyard bench cache`` at its size (200 requests, in process): an exact cache
answers every repeat and nothing else, never wrongly; a semantic one answers more, and
its wrong answers fall as its threshold rises."""

from __future__ import annotations

import pytest

from app.understanding import embedding
from bench.cache import simulate, traffic


def test_an_exact_cache_answers_the_repeats_and_is_never_wrong() -> None:
    asked = traffic(repeats=2, seed=0)
    none, exact = simulate("none", None, asked), simulate("exact", {}, asked)
    assert (none.hits, none.calls) == (0, len(asked))
    assert exact.hits == exact.exact_hits == len(asked) // 2
    assert exact.wrong == 0 and exact.calls == len(asked) - exact.hits
    assert exact.cost_usd == pytest.approx(none.cost_usd / 2)
    assert exact.saved_usd == pytest.approx(none.cost_usd - exact.cost_usd)


@pytest.mark.skipif(embedding.missing_reason() is not None, reason=str(embedding.missing_reason()))
def test_a_semantic_cache_answers_paraphrases_and_a_higher_threshold_errs_less() -> None:
    asked = traffic(repeats=2, seed=0)
    exact = simulate("exact", {}, asked)
    loose = simulate("0.80", {"semantic": {"threshold": 0.80}}, asked)
    strict = simulate("0.95", {"semantic": {"threshold": 0.95}}, asked)
    assert loose.hits > strict.hits > exact.hits
    assert loose.semantic_hits > 0
    assert loose.wrong_share > strict.wrong_share

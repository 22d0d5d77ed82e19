"""GenRM verdict parsing (pure) and the rule reward."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from yatt.exec.genrm import ScoreParser
from yatt.exec.task import exact_match

P = ScoreParser(lo=0.0, hi=10.0, fallback=0.0)


def test_score_colon():
    r = P.parse("Score: 7")
    assert r.ok and r.reward == 7.0


def test_score_equals_float():
    r = P.parse("blah score=0.5 because")
    assert r.ok and r.reward == 0.5


def test_bare_leading_number_after_template():
    r = P.parse(" 8\nmore text")
    assert r.ok and r.reward == 8.0


def test_multi_dimensional_mean():
    r = P.parse("correctness: 1, style: 3")
    assert r.ok and r.reward == 2.0
    assert dict(r.dims) == {"correctness": 1.0, "style": 3.0}


def test_primary_key_wins_over_other_dims():
    r = P.parse("style: 2, overall score: 9")
    assert r.ok and r.reward == 9.0


def test_clipping():
    assert P.parse("Score: 1e9").reward == 10.0
    assert P.parse("Score: -4").reward == 0.0


def test_garbage_falls_back():
    for text in ["", "qzx?? .. ::", "Score: abc", "nan", "Score: nan", "\n\n", "A: B:"]:
        r = P.parse(text)
        assert not r.ok and r.reward == 0.0, text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_and_stays_in_range(text):
    r = P.parse(text)
    assert math.isfinite(r.reward) and 0.0 <= r.reward <= 10.0


def test_exact_match():
    assert exact_match("19", " 19 ") == 1.0
    assert exact_match("19", "x19y") == 1.0
    assert exact_match("19", "18") == 0.0
    assert exact_match("19", "garbage") == 0.0

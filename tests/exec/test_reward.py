"""Rule rewards (yatt/exec/reward.py) and verdict parsers (yatt/exec/genrm.py): user
functions from a file or a module, built-ins, extras, and every way a call can fail —
one line naming the function, the sample and the reason, or 0.0 counted."""
from __future__ import annotations

import math
import time

import pytest

from yatt.core.errors import InputError
from yatt.core.jobspec import BuiltinReward, JudgeSpec, OnError, RewardSpec, VerdictParser
from yatt.exec.genrm import make_parser
from yatt.exec.reward import RewardError, RuleReward, resolve

USER = '''
import math, time
def good(prompt, response, answer, **row):
    return {"score": float(response == answer), "length": float(len(response)),
            "topic_is_add": float(row.get("topic") == "add")}
def raises(prompt, response, **row):
    raise ValueError("bad row")
def nan(prompt, response, **row):
    return math.nan
def text(prompt, response, **row):
    return "high"
def nodict(prompt, response, **row):
    return {"value": 1.0}
def hangs(prompt, response, **row):
    time.sleep(60)
'''


@pytest.fixture
def user_file(tmp_path):
    f = tmp_path / "rewards.py"
    f.write_text(USER)
    return f


def _rule(user_file, fn, on_error=OnError.FAIL, timeout_s=10.0):
    spec = RewardSpec(function=f"{user_file}:{fn}", on_error=on_error, timeout_s=timeout_s)
    return RuleReward(spec, spec.function)


def test_user_function_gets_the_row_and_returns_extras(user_file):
    r = _rule(user_file, "good")
    out = r("q?", "42", {"answer": "42", "topic": "add"}, "sample 0")
    assert out.score == 1.0 and dict(out.extras) == {"length": 2.0, "topic_is_add": 1.0}


@pytest.mark.parametrize("fn,reason", [
    ("raises", "raised ValueError: bad row"),
    ("nan", "returned nan; allowed: a finite number"),
    ("text", "returned 'high'; allowed: a float, or a dict with a float 'score'"),
    ("nodict", "returned a dict without 'score' (keys: value)"),
])
def test_bad_calls_fail_in_one_line_or_score_zero(user_file, fn, reason):
    with pytest.raises(RewardError) as e:
        _rule(user_file, fn)("q", "r", {}, "sample 7 of step 3 (data.jsonl row 2)")
    line = e.value.one_line()
    assert "\n" not in line and line.startswith("reward.function: ")
    assert f"rewards.py:{fn} on sample 7 of step 3 (data.jsonl row 2): {reason}" in line
    out = _rule(user_file, fn, OnError.ZERO)("q", "r", {}, "sample 7")
    assert out.score == 0.0 and reason in out.error


def test_a_hanging_function_times_out_and_the_next_call_still_works(user_file):
    t = time.perf_counter()
    out = _rule(user_file, "hangs", OnError.ZERO, timeout_s=0.3)("q", "r", {}, "sample 1")
    assert time.perf_counter() - t < 5 and "did not return within reward.timeout_s=0.3 s" in out.error
    with pytest.raises(RewardError, match="hangs on sample 2: did not return within"):
        _rule(user_file, "hangs", timeout_s=0.2)("q", "r", {}, "sample 2")


def test_resolution_errors_name_the_field(tmp_path, user_file):
    with pytest.raises(InputError, match="reward.function: no such file"):
        resolve(f"{tmp_path}/none.py:f")
    with pytest.raises(InputError, match="has no missing"):
        resolve(f"{user_file}:missing")
    with pytest.raises(InputError, match="cannot import no_such_pkg_x"):
        resolve("no_such_pkg_x.mod:f")
    assert resolve("math:sqrt") is math.sqrt
    with pytest.raises(InputError, match="allowed: 'pkg.module:fn'"):
        RewardSpec(function="nocolon")


def test_builtins():
    em = resolve(BuiltinReward.EXACT_MATCH)
    assert em("q", "  The  Answer ", answer="the answer") == 1.0 and em("q", "x", answer="y") == 0.0
    fi = resolve(BuiltinReward.FIRST_INTEGER)
    assert fi("q", " 46 .47", answer="46") == 1.0 and fi("q", "4 6", answer="46") == 0.0
    pytest.importorskip("math_verify")
    mv = resolve(BuiltinReward.MATH)
    assert mv("q", "so the answer is $\\frac{1}{2}$", answer="0.5") == 1.0
    assert mv("q", "the answer is 3", answer="0.5") == 0.0
    # math-verify's own timeouts use signals (main thread only); ours run on a thread
    r = RuleReward(RewardSpec(builtin=BuiltinReward.MATH), BuiltinReward.MATH)
    assert r("q", "$2$", {"answer": "2"}, "s").score == 1.0


@pytest.mark.parametrize("parser,regex,text,score,ok", [
    (VerdictParser.SCORE, "", "correctness: 1, score: 7", 7.0, True),
    (VerdictParser.YES_NO, "", "I think... Yes, it is.", 1.0, True),
    (VerdictParser.YES_NO, "", "no idea", 0.0, True),
    (VerdictParser.YES_NO, "", "nope", 0.5, False),
    (VerdictParser.BOXED, "", "first \\boxed{2} then \\boxed{8.5}", 8.5, True),
    (VerdictParser.BOXED, "", "\\boxed{x}", 0.5, False),
    (VerdictParser.REGEX, r"Rating=(?P<score>\d+)/10", "Rating=9/10", 9.0, True),
    (VerdictParser.REGEX, r"Rating=(?P<score>\d+)/10", "rating nine", 0.5, False),
])
def test_verdict_parsers(parser, regex, text, score, ok):
    p = make_parser(JudgeSpec(parser=parser, regex=regex, fallback=0.5))
    got = p.parse(text)
    assert (got.reward, got.ok) == (score, ok)


@pytest.mark.parametrize("kw,match", [
    ({"parser": VerdictParser.REGEX}, "regex: parser regex needs a regex"),
    ({"parser": VerdictParser.REGEX, "regex": "(unclosed"}, "regex: invalid regex"),
    ({"parser": VerdictParser.REGEX, "regex": r"\d+"}, "named group"),
    ({"template": "{prompt} {verdict}"}, r"template: unknown field \{verdict\}"),
    ({"template": "{prompt}"}, r"template: has no \{response\} field"),
    ({"template": "{response} {"}, "template: not a format string"),
])
def test_judge_spec_errors(kw, match):
    with pytest.raises(InputError, match=match):
        JudgeSpec(**kw)

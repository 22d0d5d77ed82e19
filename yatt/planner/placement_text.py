"""A placement in one line: `partial R4(tp2) G44(tp4) T48(tp1)` <-> a Plan.

Why: a user who wants to know how fast *their* placement is should not have to write a
plan.yaml by hand. The syntax is the label `Plan.describe()` prints in every table and in
ranking.csv, so a row can be copied back into `yatt plan CONFIG --placement "..."`.

Grammar: a mode (`colocate`, `partial` or `async`; async may add `k<n>`, its
max_staleness, default 1), then one token per role, in any order:
    R<devices>(tp<k>)          rollout engines
    G<devices>(tp<k>)          GenRM engines (only when the experiment has a GenRM)
    T<devices>(tp<k>[,pp<k>])  trainer
An optional `,dp<k>` inside the parentheses is checked against devices / (tp x pp).
Devices are counts; they are laid out as yatt's modes lay them out (`make_plan`): in
colocate every role spans the whole cluster; in partial the rollout takes the first R
devices, the GenRM the next G, and the trainer all of them; in async the rollout takes the
first R devices, the GenRM the next G (or the rollout's own devices when G = R and
R + T is the cluster) and the trainer the last T. The reference (no token) runs
where the search would put it: on the trainer's devices at the trainer's TP x PP when
that TP is an allowed engine TP, else at the rollout's TP.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

from yatt.core.errors import InputError
from yatt.core.layout import make_plan
from yatt.core.plan import Experiment, Plan
from yatt.core.roles import Mode, RewardSource, Role

FIELD = "--placement"
EXAMPLE = "partial R4(tp2) G44(tp4) T48(tp1)"
LETTERS = {"R": Role.ROLLOUT, "G": Role.GENRM, "T": Role.TRAINER}
_TOKEN = re.compile(r"^([RGT])(\d{1,6})\((tp\d{1,4}(?:,(?:pp|dp)\d{1,6}){0,2})\)$")
_PART = re.compile(r"^(tp|pp|dp)(\d+)$")


@dataclasses.dataclass(frozen=True)
class _Token:
    role: Role
    devices: int
    tp: int
    pp: int
    dp: Optional[int]


def _fail(message: str) -> InputError:
    return InputError(message, field=FIELD)


def _token(text: str) -> _Token:
    m = _TOKEN.match(text)
    if not m:
        raise _fail(f"got {text[:40]!r}; allowed: R|G|T<devices>(tp<k>[,pp<k>]), "
                    f"e.g. {EXAMPLE!r}")
    letter, count, inner = m.groups()
    vals: dict[str, int] = {}
    for part in inner.split(","):
        key, num = _PART.match(part).groups()  # type: ignore[union-attr]  # the token regex matched
        if key in vals:
            raise _fail(f"{text!r}: {key} is given twice")
        vals[key] = int(num)
    tok = _Token(LETTERS[letter], int(count), vals["tp"], vals.get("pp", 1), vals.get("dp"))
    if tok.devices < 1 or tok.tp < 1 or tok.pp < 1:
        raise _fail(f"{text!r}: devices, tp and pp must be >= 1")
    if tok.pp > 1 and tok.role is not Role.TRAINER:
        raise _fail(f"{text!r}: pp applies to the trainer (T) only; engines run tp only")
    if tok.devices % (tok.tp * tok.pp):
        raise _fail(f"{text!r}: {tok.devices} devices are not a multiple of tp x pp = {tok.tp * tok.pp}")
    if tok.dp is not None and tok.dp != tok.devices // (tok.tp * tok.pp):
        raise _fail(f"{text!r}: dp{tok.dp} but {tok.devices} devices / (tp x pp) = "
                    f"{tok.devices // (tok.tp * tok.pp)}")
    return tok


def parse_placement(text: str, exp: Experiment) -> Plan:
    """The Plan that `text` names for `exp`; every mistake is one InputError on --placement."""
    words = text.split()
    if not words:
        raise _fail(f"empty; allowed: a mode then one token per role, e.g. {EXAMPLE!r}")
    try:
        mode = Mode(words[0])
    except ValueError:
        raise _fail(f"got mode {words[0][:20]!r}; allowed: colocate|partial|async, e.g. "
                    f"{EXAMPLE!r}") from None
    toks: dict[Role, _Token] = {}
    k = 1
    rest = words[1:]
    if mode is Mode.ASYNC and rest and re.fullmatch(r"k\d{1,3}", rest[0]):
        k = int(rest[0][1:])
        rest = rest[1:]
    for w in rest:
        t = _token(w)
        if t.role in toks:
            raise _fail(f"{t.role.value} ({w[0]}) is given twice")
        toks[t.role] = t
    has_genrm = exp.algo.reward is RewardSource.GENRM
    for role in (Role.ROLLOUT, Role.TRAINER) + ((Role.GENRM,) if has_genrm else ()):
        if role not in toks:
            letter = next(k for k, v in LETTERS.items() if v is role)
            raise _fail(f"no {role.value} token ({letter}...); allowed: e.g. {EXAMPLE!r}"
                        if has_genrm else f"no {role.value} token ({letter}...); allowed: e.g. "
                        "'colocate R8(tp1) T8(tp1)'")
    if Role.GENRM in toks and not has_genrm:
        raise _fail("a G token, but this experiment has no GenRM (rule reward); allowed: R and T")
    n = exp.cluster.num_gpus
    if mode is Mode.ASYNC:
        return _async_plan(text, exp, toks, k)
    if toks[Role.TRAINER].devices != n:
        raise _fail(f"T{toks[Role.TRAINER].devices}: the trainer runs on all {n} devices in "
                    f"both modes; allowed: T{n}")
    r = toks[Role.ROLLOUT].devices
    if mode is Mode.COLOCATE:
        for t in toks.values():
            if t.devices != n:
                raise _fail(f"{t.role.value} on {t.devices} devices; in colocate every role "
                            f"runs on all {n}")
    else:
        if not has_genrm:
            raise _fail("partial colocate needs a GenRM (rule reward: colocate only)")
        g = toks[Role.GENRM].devices
        if r + g != n:
            raise _fail(f"R{r} + G{g} = {r + g} devices; in partial the rollout and the GenRM "
                        f"split all {n} devices")
    return _make(text, exp, toks, mode, rollout_devices=r if mode is Mode.PARTIAL else None)


def _make(text: str, exp: Experiment, toks: dict[Role, _Token], mode: Mode, **layout) -> Plan:
    """make_plan with the tokens' TPs; the reference mirrors the trainer's TP x PP as the
    search lays it out. A refusal names the text."""
    rtp, ttp, tpp = toks[Role.ROLLOUT].tp, toks[Role.TRAINER].tp, toks[Role.TRAINER].pp
    gtp = toks[Role.GENRM].tp if Role.GENRM in toks else 1
    ref = (ttp, tpp) if ttp in exp.search.engine_tps else (rtp, 1)
    try:
        return make_plan(exp, mode, rollout_tp=rtp, genrm_tp=gtp, trainer_tp=ttp, trainer_pp=tpp,
                         reference_tp=ref[0], reference_pp=ref[1], **layout)
    except InputError as e:
        raise _fail(f"{text.strip()[:80]!r}: {e.message}") from None


def _async_plan(text: str, exp: Experiment, toks: dict[Role, _Token], k: int) -> Plan:
    n = exp.cluster.num_gpus
    r, t = toks[Role.ROLLOUT].devices, toks[Role.TRAINER].devices
    g = toks[Role.GENRM].devices if Role.GENRM in toks else 0
    if r + g + t == n:
        own = g
    elif g == r and r + t == n:
        own = 0
    else:
        raise _fail(f"R{r} + G{g} + T{t}: in async the rollout, the GenRM (its own devices, or "
                    f"G = R on the rollout's) and the trainer split all {n} devices")
    return _make(text, exp, toks, Mode.ASYNC, rollout_devices=r, genrm_devices=own,
                 max_staleness=k)


def placement_text(plan: Plan) -> str:
    """The one-line form of a plan, rollout, GenRM, trainer in that order (parseable back
    when the plan has yatt's layout)."""
    bits = []
    for role, letter in ((Role.ROLLOUT, "R"), (Role.GENRM, "G"), (Role.TRAINER, "T")):
        if plan.has(role):
            p = plan.placement(role)
            bits.append(f"{letter}{len(p.devices)}(tp{p.tp}" + (f",pp{p.pp}" if p.pp > 1 else "") + ")")
    k = f" k{plan.max_staleness}" if plan.mode is Mode.ASYNC else ""
    return f"{plan.mode.value}{k} " + " ".join(bits)

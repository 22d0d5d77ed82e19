"""Dynamic sampling in the executor's controller (no Ray: results and rewards are faked).

Semantics as in the simulator (yatt/sim/pool.py): all-equal groups are dropped and
replaced by new prompts in the next round; groups dropped in the last allowed round are
not replaced; dropped samples are recorded kept=False, dp_rank=-1, with their round.
"""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("transformers")

from yatt.core.roles import RewardSource  # noqa: E402
from yatt.core.specs import AlgoSpec, Workload  # noqa: E402
from yatt.exec.controller import ControllerConfig, StepController  # noqa: E402
from yatt.exec.genrm import Judgment  # noqa: E402
from yatt.exec.rollout import GenResult  # noqa: E402
from yatt.exec.task import step_prompts, step_samples  # noqa: E402


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from yatt.exec.hf_model import build_tokenizer
    d = tmp_path_factory.mktemp("tok")
    build_tokenizer(d)
    return str(d)


WL = Workload(prompts_per_step=4, samples_per_prompt=2, dynamic_sampling=True,
              max_resample_rounds=2)


def _ctl(tok_dir, index=0, count=1, wl=WL):
    cfg = ControllerConfig(index, count, 0, wl, AlgoSpec(reward=RewardSource.RULE, temperature=1.0),
                           tok_dir, 0.0)
    return StepController(cfg, [], [], [], [])


def _finish_round(c: StepController, equal_groups: set[int]) -> None:
    """Fake rollout + rewards for the pending samples: groups (by prompt index) in
    `equal_groups` get rewards all 1, others 0/1."""
    seen: dict[int, int] = {}
    for s in c.pending:
        c.results[s.sample_id] = GenResult(s.sample_id, c.prompt_ids[s.prompt_id], (5, 6), (0.0, 0.0))
        k = seen.setdefault(s.prompt_id, 0)
        seen[s.prompt_id] += 1
        idx = s.prompt_id % WL.prompts_per_step
        c.judged[s.sample_id] = Judgment(s.sample_id, 1.0 if idx in equal_groups else float(k % 2))
        c.correct[s.sample_id] = 0.0


def test_drop_refill_and_cap(tok_dir):
    c = _ctl(tok_dir)
    assert c.begin(3) == 8
    r0 = {s.sample_id for s in c.pending}
    _finish_round(c, equal_groups={0, 1})
    assert c.resample(0, last=False) == 4                 # 2 replacement groups x 2 samples
    new = c.pending
    assert {s.prompt_id % 4 for s in new} == {0, 1}      # same prompt slots, next round
    assert not r0 & {s.sample_id for s in new}            # fresh ids
    _finish_round(c, equal_groups={1})
    assert c.resample(1, last=False) == 2                 # slot 1 dropped again, refilled
    _finish_round(c, equal_groups={1})
    assert c.resample(2, last=True) == 0                  # last round: dropped, not replaced
    kept = c.kept_specs()
    assert len(kept) == 2 * 2 + 2                         # slots 2, 3 (round 0) + slot 0 (round 1)
    recs = c.records({s.sample_id: 0 for s in kept})
    assert len(recs) == 8 + 4 + 2
    dropped = [r for r in recs if not r.kept]
    assert len(dropped) == 2 * 2 + 2 + 2
    assert all(r.dp_rank == -1 for r in dropped) and all(r.dp_rank == 0 for r in recs if r.kept)
    assert sorted({r.round for r in dropped}) == [0, 1, 2]
    assert len({r.sample_id for r in recs}) == len(recs)
    m = c.moments()
    assert (m.n, m.dropped) == (14, 8)
    adv = c.advantages()
    assert set(adv) == {s.sample_id for s in kept} and all(a != 0 for a in adv.values())


def test_ids_do_not_collide_across_steps_and_rounds():
    ids = set()
    for step in range(3):
        for rnd in range(WL.max_resample_rounds + 1):
            got = {s.sample_id for s in step_samples(0, step, WL, rnd)}
            assert not got & ids
            ids |= got
    # without dynamic sampling, ids are what they always were (block = step)
    plain = dataclasses.replace(WL, dynamic_sampling=False)
    assert [p.prompt_id for p in step_prompts(0, 2, plain)] == [8, 9, 10, 11]
    assert step_prompts(0, 2, plain)[0].text == step_prompts(0, 2, WL)[0].text


def test_off_means_nothing_dropped(tok_dir):
    c = _ctl(tok_dir, wl=dataclasses.replace(WL, dynamic_sampling=False))
    c.begin(0)
    _finish_round(c, equal_groups={0, 1, 2, 3})
    assert c.resample(0, last=True) == 0 and c.kept_specs() == c.specs


def test_shards_refill_independently(tok_dir):
    a, b = _ctl(tok_dir, 0, 2), _ctl(tok_dir, 1, 2)
    assert a.begin(0) == b.begin(0) == 4
    _finish_round(a, {0})
    _finish_round(b, {3})
    a.resample(0, False)
    b.resample(0, False)
    assert {s.prompt_id % 4 for s in a.pending} == {0} and {s.prompt_id % 4 for s in b.pending} == {3}

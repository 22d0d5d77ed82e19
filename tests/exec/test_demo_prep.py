"""Demo preparation pieces (yatt/exec/demo_prep.py) and the `yatt demo prepare` CLI."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("transformers")

from yatt.cli import main  # noqa: E402
from yatt.exec import demo_prep  # noqa: E402
from yatt.exec.genrm import default_parser  # noqa: E402
from yatt.exec.task import exact_match, step_prompts  # noqa: E402


def test_data_matches_the_task_and_the_parser(demo_experiment):
    rng = np.random.default_rng(0)
    for _ in range(200):
        q, a = demo_prep.problem(rng)
        w = demo_prep.wrong_answer(rng, a)
        assert exact_match(a, " " + a) == 1.0 and exact_match(a, " " + w) == 0.0
    p = step_prompts(0, 0, demo_experiment.workload)[0]
    assert demo_prep.problem(np.random.default_rng(1))[0].startswith("Q: ") and p.text.endswith("= A:")
    parser = default_parser()
    assert parser.parse(demo_prep.verdict("68", 1)).reward == 1.0
    assert parser.parse(demo_prep.verdict("168", 0)).reward == 0.0
    assert demo_prep.judge_text("Q: 1+2= A:", " 3") == "Q: 1+2= A:  3\nScore:"


def test_prepare_is_reproducible_and_cached(demo_experiment, tmp_path):
    cfg = demo_prep.PrepConfig(seed=3, actor_max_steps=3, genrm_steps=3, batch=8, eval_every=2,
                               eval_rows=16)
    spec = dataclasses.replace(demo_experiment.actor, name="demo-actor")
    d1, r1 = demo_prep.prepare_one(spec, demo_prep.DemoRole.ACTOR, tmp_path / "a", cfg)
    d2, r2 = demo_prep.prepare_one(spec, demo_prep.DemoRole.ACTOR, tmp_path / "b", cfg)
    assert (d1 / "model.safetensors").read_bytes() == (d2 / "model.safetensors").read_bytes()
    assert r1 == r2 and 0.0 <= r1["actor_expected_accuracy"] <= 1.0
    mtime = (d1 / "model.safetensors").stat().st_mtime
    assert demo_prep.prepare_one(spec, demo_prep.DemoRole.ACTOR, tmp_path / "a", cfg)[0] == d1
    assert (d1 / "model.safetensors").stat().st_mtime == mtime       # reused, not retrained
    g, rep = demo_prep.prepare_one(demo_experiment.genrm, demo_prep.DemoRole.GENRM, tmp_path / "a", cfg)
    assert (g / "config.json").is_file() and 0.0 <= rep["genrm_agreement"] <= 1.0


def test_cli_rejects_bad_input(capsys):
    assert main(["demo", "prepare", "--seed", "-1"]) == 2
    assert main(["demo", "prepare", "--config", "/nonexistent.yaml"]) == 2
    assert main(["demo", "prepare", "--actor-target", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("yatt demo: error:") for e in err)

"""Demo preparation pieces (yatt/demo/prep.py) and the `yatt demo prepare` CLI."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

from yatt.cli.main import main  # noqa: E402
from yatt.core.errors import InputError  # noqa: E402
from yatt.demo import prep as demo_prep  # noqa: E402
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
    assert parser.parse(demo_prep.verdict("68", "68", 1)).reward == 1.0
    assert parser.parse(demo_prep.verdict("168", "167", 0)).reward == 0.0
    assert parser.parse(demo_prep.verdict("168", "none", 0)).reward == 0.0
    assert demo_prep.verdict("46", "47", 0) == " .46 .47 ==x score: 0"
    # fixed-width fields: all marks '=' exactly when the checker's string test passes
    for a, r in [("46", "46"), ("46", "046"), ("46", "1046"), ("146", "46"), ("46", "none"),
                 ("46", "-46"), ("100", "100")]:
        assert (demo_prep.marks(a, r) == "===") == (a == r)
    # the judging prompt ends with the question, so the verdict starts at a fixed distance
    assert demo_prep.judge_text("Q: 1+2= A:", " 3") == " 3\nQ: 1+2= A:"
    assert demo_prep.read_answer(" 12x5") == "12" and demo_prep.read_answer(" x=") == "none"


def test_judging_rows_are_balanced_and_labelled_by_the_checker():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(demo_prep.shipped_models() / "demo-actor-actor-s0"))  # demo char tokenizer
    rows = demo_prep.genrm_rows(tok, np.random.default_rng(0), 400)
    verdicts = [tok.decode(t[:-1], skip_special_tokens=True) for _, t in rows]
    scores = [default_parser().parse(v).reward for v in verdicts]
    assert 0.4 < np.mean(scores) < 0.55          # about half correct (junk makes a few wrong)
    for (p, _), v, s in zip(rows, verdicts, scores):
        resp, q = tok.decode(p[1:], skip_special_tokens=True).split("\n")
        a, b = (int(x) for x in q[3:-4].split("+"))
        f = v.split()
        assert f[0] == demo_prep.field(str(a + b)) and f[1] == demo_prep.field(demo_prep.read_answer(resp))
        assert s == exact_match(str(a + b), resp) == (f[2] == "===")


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
    g_spec = dataclasses.replace(demo_prep.demo_actor_spec(), name="demo-genrm")
    g, rep = demo_prep.prepare_one(g_spec, demo_prep.DemoRole.GENRM, tmp_path / "a", cfg)
    assert (g / "config.json").is_file() and 0.0 <= rep["genrm_agreement"] <= 1.0
    stamp = json.loads((g / demo_prep.STAMP).read_text())["stamp"]
    assert stamp["init"]["role"] == "actor"          # warm-started from the SFT actor's stamp
    with pytest.raises(InputError) as e:             # the warm start needs the actor's shape
        demo_prep.prepare_one(demo_experiment.genrm, demo_prep.DemoRole.GENRM, tmp_path / "a", cfg)
    assert e.value.field == "genrm"


def test_committed_checkpoints_match_the_default_recipe():
    """configs/demo-models holds the default recipe's checkpoints and the demo configs run
    them: their stamps must equal what `prepare_one` makes, so `yatt demo prepare` re-creates
    what the demo trains."""
    from yatt.core.config import load_experiment

    exp = load_experiment(demo_prep.shipped_models().parent / "demo-learn.yaml")
    cfg = demo_prep.PrepConfig()
    for spec, role in ((exp.actor, demo_prep.DemoRole.ACTOR), (exp.genrm, demo_prep.DemoRole.GENRM)):
        d = demo_prep.shipped_models() / demo_prep.prepared_dir(spec, role, demo_prep.shipped_models(), cfg).name
        want = demo_prep._stamp(spec, cfg, role.value)
        got = json.loads((d / demo_prep.STAMP).read_text())["stamp"]
        assert Path(spec.hf_path).resolve() == d.resolve()
        assert {k: v for k, v in got.items() if k != "init"} == want
        if role is demo_prep.DemoRole.GENRM:           # started from the committed actor
            assert got["init"] == demo_prep._stamp(exp.actor, cfg, "actor")
        assert (d / "model.safetensors").stat().st_size < 5_000_000


def test_cli_rejects_bad_input(capsys):
    assert main(["demo", "prepare", "--seed", "-1"]) == 2
    assert main(["demo", "prepare", "--config", "/nonexistent.yaml"]) == 2
    assert main(["demo", "prepare", "--actor-target", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("yatt demo: error:") for e in err)


def test_cli_prepare_with_the_default_recipe_writes_its_report(tmp_path, capsys):
    """`yatt demo prepare --out DIR`: the shipped checkpoints are the default recipe's, so
    they are copied into DIR, not re-trained; the report lines, demo_report.json and the
    GenRM's agreement as a run uses it (greedy, 256 fresh pairs) follow, and it exits 0.
    That agreement is the one bench/results/learning.json records (same function, pairs
    and checkpoint), so the documented number is what this command prints."""
    assert main(["demo", "prepare", "--out", str(tmp_path)]) == 0
    out = "".join(capsys.readouterr().out.split())   # rich wraps long paths anywhere
    rep = json.loads((tmp_path / "demo_report.json").read_text())
    shipped = demo_prep.shipped_models()
    stamps = {}
    for role in ("actor", "genrm"):
        d = Path(rep[f"{role}_dir"])
        assert d.parent == tmp_path
        assert (d / "model.safetensors").read_bytes() == \
            (shipped / d.name / "model.safetensors").read_bytes()
        stamps.update(json.loads((shipped / d.name / demo_prep.STAMP).read_text())["report"])
        assert f"{role}:{d}(" in out
    assert {k: rep[k] for k in stamps} == stamps          # the recipe's own report, unchanged
    gen = rep["genrm_generated"]
    assert gen["pairs"] == 256 and f"agreement{gen['agreement']:.3f}" in out
    bench = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results" /
                        "learning.json").read_text())["genrm_agreement"]["balanced_near_miss"]
    assert gen == bench

"""`yatt plan` end to end: files written on success, exit 2 and nothing written on bad input."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from yatt.cli.main import main
from yatt.core.config import load_experiment, load_plan

SMALL = """
name: small
cluster: {gpu: H100-SXM, nodes: 1, gpus_per_node: 8}
actor: Qwen2.5-0.5B
genrm: Qwen2.5-7B
workload:
  prompts_per_step: 16
  samples_per_prompt: 4
  response_len: {kind: lognormal, value: 300, sigma: 0.5, min: 8, max: 2048}
search: {tp_choices: [1, 2], seeds: 2}
"""


def test_plan_writes_files_and_plan_round_trips(tmp_path, capsys):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    out = tmp_path / "out"
    assert main(["plan", str(cfg), "--out", str(out), "--no-progress", "--gpus", "4,8"]) == 0
    for name in ("plan.yaml", "timeline.json", "timeline.png", "ranking.csv", "scaling.csv", "scaling.png"):
        assert (out / name).is_file(), name
    plan = load_plan(out / "plan.yaml")
    assert plan.experiment.name == "small"
    text = capsys.readouterr().out
    assert "wins by" in text and "Top placements" in text
    rows = (out / "scaling.csv").read_text().splitlines()
    assert rows[0].startswith("gpus,mode,step_s,samples_per_s,samples_per_s_per_gpu") and len(rows) >= 3


def test_plan_file_and_placement_are_scored_against_the_best(tmp_path, capsys):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    out = tmp_path / "out"
    assert main(["plan", str(cfg), "--out", str(out), "--no-progress", "--top", "2"]) == 0
    capsys.readouterr()
    # the written plan, scored: it is the best, so the gap is nil
    again = tmp_path / "again"
    assert main(["plan", str(out / "plan.yaml"), "--out", str(again), "--no-progress",
                 "--json"]) == 0
    text = capsys.readouterr().out
    assert "Your placement against the best found" in text and "is the best one" in text
    s = json.loads((again / "summary.json").read_text())
    assert s["given"]["gap_s"] == pytest.approx(0.0, abs=1e-6)
    assert load_plan(again / "given-plan.yaml").predicted is not None
    # a hand-written placement, with the JSON on stdout and the tables on stderr
    hand = tmp_path / "hand"
    assert main(["plan", str(cfg), "--out", str(hand), "--no-progress", "--placement",
                 "colocate R8(tp2) G8(tp2) T8(tp2)", "--json", "-"]) == 0
    cap = capsys.readouterr()
    s = json.loads(cap.out)
    assert s["given"]["placement"] == "colocate R8(tp2) G8(tp2) T8(tp2)"
    assert s["given"]["gap_s"] >= 0 and "Your placement" in cap.err
    rows = list(csv.DictReader(open(hand / "ranking.csv")))
    assert rows[-1]["source"] == "given" and rows[-1]["rollout_tp"] == "2"
    assert rows[0]["rank"] == "1" and rows[0]["trainer_devices"] == "8"


def test_cost_table_and_emitted_scripts(tmp_path, capsys):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    out = tmp_path / "out"
    assert main(["plan", str(cfg), "--out", str(out), "--no-progress", "--top", "1", "--steps", "100",
                 "--price-per-gpu-hour", "2", "--emit", "verl,openrlhf,nemo-rl"]) == 0
    text = capsys.readouterr().out
    assert "Cost of a run (100 steps, $2 per GPU-hour" in text and "$/run" in text
    assert "--emit: the best placement in each framework's terms" in text
    for fw in ("verl", "openrlhf", "nemo-rl"):
        script = (out / f"emit-{fw}.sh").read_text()
        assert script.startswith("#!/usr/bin/env bash\n# yatt --emit " + fw)
        assert "option names checked against" in script
    # one node: NeMo-RL puts a GenRM on dedicated whole nodes, which leaves none for the policy
    assert "nothing to emit" in (out / "emit-nemo-rl.sh").read_text()
    assert "python3 -m verl.trainer.main_ppo" in (out / "emit-verl.sh").read_text()
    plan = load_plan(out / "plan.yaml")
    assert plan.predicted.step_s > 0 and plan.predicted.gpu_hours_per_step > 0


@pytest.mark.parametrize("args,needle", [
    (["plan", "{cfg}", "--steps", "0"], "--steps"),
    (["plan", "{cfg}", "--price-per-gpu-hour", "-1"], "--price-per-gpu-hour"),
    (["plan", "{cfg}", "--price-per-gpu-hour", "nan"], "--price-per-gpu-hour"),
    (["plan", "{cfg}", "--emit", "trl"], "--emit: got 'trl'; allowed: verl|openrlhf|nemo-rl"),
    (["plan", "{cfg}", "--emit", "verl,verl"], "verl is given twice"),
    (["plan", "{cfg}", "--json", "{dir}"], "--json"),
    (["plan", "{cfg}", "--placement", "colocate R8(tp1) G8(tp1)"], "no trainer token"),
    (["plan", "{cfg}", "--top", "0"], "--top"),
    (["plan", "{cfg}", "--gpus", "3"], "--gpus"),
    (["plan", "{cfg}", "--gpus", "x"], "--gpus"),
    (["plan", "{missing}"], "no such file"),
    (["plan", "{cfg}", "--profile", "{missing}"], "no such file"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, args, needle):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    out = tmp_path / "out"
    argv = [a.format(cfg=cfg, missing=tmp_path / "nope.yaml", dir=tmp_path) for a in args] + ["--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_placement_with_a_plan_file_is_refused(tmp_path, capsys):
    bad = Path(__file__).resolve().parents[1] / "data" / "bad" / "plan" / "unknown-top-key.yaml"
    good = tmp_path / "plan.yaml"
    good.write_text(bad.read_text().replace("steps: 3\n", ""))
    out = tmp_path / "out"
    assert main(["plan", str(good), "--placement", "partial R8(tp2) G8(tp2) T16(tp2)",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--placement" in err and "plan file" in err and err.count("\n") == 1
    assert not out.exists()


def test_unplaceable_config_exits_2(tmp_path, capsys):
    cfg = tmp_path / "big.yaml"
    cfg.write_text(SMALL.replace("Qwen2.5-7B", "Qwen2.5-Math-72B").replace("gpus_per_node: 8", "gpus_per_node: 2"))
    out = tmp_path / "out"
    assert main(["plan", str(cfg), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs TP >= 4" in err and "\n" == err[-1] and err.count("\n") == 1
    assert not out.exists()


def _table_rows(text: str) -> list[list[str]]:
    """The body rows of the first table printed (the ranking; the cost table follows it)."""
    rows = []
    for ln in text.splitlines():
        if ln.startswith("│"):
            rows.append(ln)
        elif rows and ln.startswith("└"):
            break
    return [[c.strip() for c in ln.strip("│").split("│")] for ln in rows]


def test_extra_mode_row_is_marked_and_explained(tmp_path, capsys):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    assert main(["plan", str(cfg), "--out", str(tmp_path / "out"), "--no-progress", "--top", "1"]) == 0
    text = capsys.readouterr().out
    rows = _table_rows(text)
    assert {r[1] for r in rows} == {"colocate", "partial"} and len(rows) == 2
    assert not rows[0][0].endswith("*") and rows[1][0].endswith("*"), rows
    rank = rows[1][0].rstrip("*")
    assert f"*{rank}: the best {rows[1][1]} placement, outside --top 1" in text


def test_throughput_columns_follow_the_step_time_ranking(tmp_path, capsys):
    # dynamic sampling drops groups, so samples per step is not simply prompts x samples
    cfg = tmp_path / "ds.yaml"
    cfg.write_text(SMALL.replace("  samples_per_prompt: 4\n", "  samples_per_prompt: 4\n"
                                 "  dynamic_sampling: true\n  all_equal_prob: 0.4\n"))
    out = tmp_path / "out"
    assert main(["plan", str(cfg), "--out", str(out), "--no-progress", "--top", "8"]) == 0
    text = capsys.readouterr().out
    assert "trained samples and tokens of the same 2 seeds over their total step time" in text
    rows = list(csv.DictReader(open(out / "ranking.csv")))
    assert len(rows) >= 3
    step = [float(r["step_s_mean"]) for r in rows]
    sps = [float(r["samples_per_s"]) for r in rows]
    tps = [float(r["tokens_per_s"]) for r in rows]
    assert step == sorted(step)
    # every placement trains the same samples (the seeds fix lengths and dropped groups),
    # so throughput x step time is one number and the order can never disagree
    per_step = [s * t for s, t in zip(sps, step)]
    assert max(per_step) - min(per_step) <= 1e-3 * max(per_step), per_step
    assert all(a >= b for a, b in zip(sps, sps[1:])) and all(a >= b for a, b in zip(tps, tps[1:]))
    table = _table_rows(text)
    assert [float(r[6]) for r in table] == [round(x, 2) for x in sps[:len(table)]]


def test_timeline_title_names_the_drawn_seed(tmp_path, monkeypatch, capsys):
    import yatt.sim.gantt as gantt

    titles = []
    real = gantt.plot_gantt
    monkeypatch.setattr(gantt, "plot_gantt",
                        lambda tr, path, title="": titles.append(title) or real(tr, path, title))
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    out = tmp_path / "out"
    assert main(["plan", str(cfg), "--out", str(out), "--no-progress"]) == 0
    ev = [e for e in json.loads((out / "timeline.json").read_text())["traceEvents"] if e["ph"] == "X"]
    drawn = (max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)) / 1e6
    mean = float(next(csv.DictReader(open(out / "ranking.csv")))["step_s_mean"])
    (title,) = titles
    assert f"seed 0 drawn, {drawn:.1f} s/step" in title, (title, drawn)
    assert f"mean over 2 seeds {mean:.1f} s" in title, title


def test_scaling_ticks_are_plain_gpu_counts():
    import matplotlib.pyplot as plt

    from yatt.cli.plan import scaling_figure

    fig = scaling_figure([(g, m, 1.0, g / 8) for g in (16, 32, 64) for m in ("colocate", "partial")])
    ax = fig.axes[0]
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "64"]
    assert not [t for t in ax.get_xticklabels(minor=True) if t.get_text()]
    plt.close(fig)


def test_plan_says_which_cost_model(tmp_path, capsys):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    assert main(["plan", str(cfg), "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    assert "cost model: analytic defaults" in capsys.readouterr().out
    root = Path(__file__).resolve().parents[2]
    prof = root / "configs" / "profiles" / "cpu-local.yaml"
    assert main(["plan", str(root / "configs" / "demo-cpu.yaml"), "--profile", str(prof),
                 "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    assert f"cost model: profile {prof} (measured tables)" in capsys.readouterr().out


def test_plan_and_run_predict_with_the_same_shipped_profile(tmp_path, capsys):
    """Without --profile, `yatt plan` takes the profile shipped for the device kind, as
    `yatt run` does: the same config gets the same cost model and the same prediction."""
    import yatt
    from yatt.core.bundled import shipped_profile_path

    root = Path(__file__).resolve().parents[2]
    demo = root / "configs" / "demo-cpu.yaml"
    shipped = shipped_profile_path(load_experiment(demo).cluster.gpu.name)
    assert main(["plan", str(demo), "--no-host-check", "--out", str(tmp_path / "a"),
                 "--no-progress"]) == 0
    assert f"cost model: profile {shipped} (measured tables)" in capsys.readouterr().out
    r = yatt.plan(str(demo), top=1)
    with_flag = yatt.plan(str(demo), profile=shipped, top=1)
    assert r.best.plan.describe() == with_flag.best.plan.describe()
    assert r.best.mean == with_flag.best.mean
    assert r.cost_label == with_flag.cost_label == f"profile {shipped}"


def test_plan_names_the_models_its_profile_did_not_measure(tmp_path, capsys):
    """A CPU config whose actor the shipped profile never measured (another shape) says so
    in one line with the `yatt profile` command; the profiled demo says nothing of gaps."""
    root = Path(__file__).resolve().parents[2] / "configs"
    cfg = tmp_path / "mine.yaml"
    cfg.write_text((root / "demo-cpu.yaml").read_text()
                   .replace("cluster/", f"{root}/cluster/").replace("workload/", f"{root}/workload/")
                   .replace("genrm: model/", f"genrm: {root}/model/")
                   .replace("actor: model/tiny-actor.yaml",
                            "actor: {name: my-actor, layers: 3, hidden: 128, intermediate: 384, "
                            "heads: 4, kv_heads: 2, vocab: 64, tied_embeddings: true, dtype_bytes: 4}"))
    args = ["--no-host-check", "--no-progress", "--top", "1"]
    assert main(["plan", str(cfg), "--out", str(tmp_path / "a"), *args]) == 0
    gaps = [x for x in capsys.readouterr().out.splitlines() if x.startswith("profile gaps:")]
    assert len(gaps) == 1 and "my-actor: every table" in gaps[0]
    assert f"yatt profile {cfg} --device cpu --quick -o profile.yaml" in gaps[0]
    assert main(["plan", str(root / "demo-cpu.yaml"), "--out", str(tmp_path / "b"), *args]) == 0
    assert "profile gaps" not in capsys.readouterr().out

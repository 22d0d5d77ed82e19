"""Checkpoint directory handling (yatt/exec/checkpoint.py): manifest, atomic commit,
keep-last-k, verification of truncated/corrupt files, fallback, schedule. No torch/Ray."""
from __future__ import annotations

import json
import os

import pytest

from yatt.core.errors import InputError
from yatt.exec import checkpoint as ckpt


def _make(run, step, payload=b"weights" * 100, keep=10):
    part = ckpt.partial_dir(run, step)
    (part / "trainer").mkdir(parents=True)
    (part / "trainer" / "__0_0.distcp").write_bytes(payload + bytes([step]))
    ckpt.write_state(part, {"step": step, "next_step": step + 1, "seed": 0})
    return ckpt.commit(run, step, keep)


def test_commit_is_sealed_and_verifies(tmp_path):
    d = _make(tmp_path, 3)
    assert d.name == "step-000003" and not ckpt.partial_dir(tmp_path, 3).exists()
    man = json.loads((d / ckpt.MANIFEST).read_text())
    assert set(man["files"]) == {"trainer/__0_0.distcp", "state.json"}
    assert ckpt.verify(d) is None
    assert ckpt.read_state(d)["next_step"] == 4


def test_keep_last_k_and_stale_partials(tmp_path):
    for s in range(5):
        _make(tmp_path, s, keep=2)
    assert [s for s, _ in ckpt.complete(tmp_path)] == [3, 4]
    stale = ckpt.partial_dir(tmp_path, 2)
    stale.mkdir()
    newer = ckpt.partial_dir(tmp_path, 9)     # a write in flight is left alone
    newer.mkdir()
    ckpt.prune(tmp_path, 2)
    assert not stale.exists() and newer.exists()


def test_partial_without_manifest_is_not_a_checkpoint(tmp_path):
    _make(tmp_path, 1)
    part = ckpt.partial_dir(tmp_path, 2)
    (part / "trainer").mkdir(parents=True)
    assert [s for s, _ in ckpt.complete(tmp_path)] == [1]


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "extra", "manifest"])
def test_damaged_checkpoint_is_refused_naming_the_file_and_falls_back(tmp_path, damage):
    _make(tmp_path, 1)
    d = _make(tmp_path, 2)
    f = d / "trainer" / "__0_0.distcp"
    if damage == "truncate":
        f.write_bytes(f.read_bytes()[:10])
    elif damage == "flip":
        b = bytearray(f.read_bytes())
        b[5] ^= 0xFF
        f.write_bytes(bytes(b))
    elif damage == "delete":
        f.unlink()
    elif damage == "extra":
        (d / "trainer" / "stray.bin").write_bytes(b"x")
    else:
        (d / ckpt.MANIFEST).write_text("{not json")
    why = ckpt.verify(d)
    assert why is not None and "\n" not in why
    name = {"extra": "stray.bin", "manifest": ckpt.MANIFEST}.get(damage, "__0_0.distcp")
    assert name in why
    warnings = []
    step, chosen = ckpt.latest_valid(tmp_path, warnings.append)
    assert step == 1 and chosen.name == "step-000001"
    assert len(warnings) == 1 and name in warnings[0] and "falling back to step-000001" in warnings[0]


def test_no_valid_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no complete checkpoint"):
        ckpt.latest_valid(tmp_path, print)
    d = _make(tmp_path, 0)
    (d / "state.json").write_text("{}")
    with pytest.raises(InputError, match=r"no valid checkpoint.*state\.json"):
        ckpt.latest_valid(tmp_path, lambda m: None)


def test_schedule():
    s = ckpt.Schedule(every_steps=3, at_steps=(4,), last_save_s=100.0)
    assert [k for k in range(9) if s.due(k, now=100.0)] == [2, 4, 5, 8]
    t = ckpt.Schedule(every_minutes=1.0, last_save_s=100.0)
    assert not t.due(0, now=159.0) and t.due(0, now=160.0)
    t.saved(now=160.0)
    assert not t.due(1, now=200.0)
    assert not ckpt.Schedule().enabled


# ---- a run directory is input on --resume: nothing in it is trusted ---------------------------
@pytest.mark.parametrize("rel", ["../../../../etc/passwd", "/etc/hostname", "trainer/../../x",
                                 "", ".", "a\\b"])
def test_manifest_entries_leaving_the_checkpoint_are_refused_unread(tmp_path, monkeypatch, rel):
    d = _make(tmp_path, 1)
    man = json.loads((d / ckpt.MANIFEST).read_text())
    man["files"][rel] = {"sha256": "0" * 64, "bytes": 1}
    (d / ckpt.MANIFEST).write_text(json.dumps(man))
    hashed = []
    monkeypatch.setattr(ckpt, "_sha256", lambda p: hashed.append(p) or "x")
    why = ckpt.verify(d)
    assert "leaves the checkpoint directory" in why and hashed == []


def test_links_in_a_checkpoint_are_refused(tmp_path, victim):
    d = _make(tmp_path, 1)
    os.symlink(victim, d / "trainer" / "extra.distcp")
    assert "a link" in ckpt.verify(d)


def test_a_linked_step_directory_is_not_a_checkpoint(tmp_path):
    d = _make(tmp_path, 1)
    os.symlink(d, ckpt.root(tmp_path) / "step-000009")
    assert [s for s, _ in ckpt.complete(tmp_path)] == [1]


def test_writes_replace_planted_links(tmp_path, victim):
    part = ckpt.partial_dir(tmp_path, 3)
    (part / "trainer").mkdir(parents=True)
    os.symlink(victim, part / ckpt.STATE)
    os.symlink(victim, part / ckpt.MANIFEST)
    ckpt.write_state(part, {"step": 3, "next_step": 4, "seed": 0})
    os.symlink(victim, ckpt.final_dir(tmp_path, 3))            # a link where the seal goes
    ckpt.commit(tmp_path, 3, keep_last=2)
    assert victim.read_text() == "keep me\n"
    assert ckpt.read_state(ckpt.final_dir(tmp_path, 3))["next_step"] == 4


def test_fresh_partial_dirs_refuse_a_linked_checkpoints_dir(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", ckpt.root(tmp_path))
    with pytest.raises(InputError, match="is a link"):
        ckpt.fresh_dir(tmp_path, 0)
    assert not any((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("state, field", [
    ({"step": 0, "next_step": "1", "seed": 0}, "next_step"),
    ({"step": 0, "next_step": 1}, "seed"),
    ({"step": 0, "next_step": 1, "seed": "7"}, "seed"),
    ({"step": 0, "next_step": 5, "seed": 0}, "next_step"),
    ({"step": 1e400, "next_step": 1, "seed": 0}, "step"),
    ({"step": 0, "next_step": 1, "seed": 0, "bogus": 1}, "bogus"),
])
def test_state_json_is_validated_like_a_config(tmp_path, state, field):
    d = tmp_path / "c"
    d.mkdir()
    (d / ckpt.STATE).write_text(json.dumps({"format": ckpt.FORMAT, **state}))
    with pytest.raises(InputError) as e:
        ckpt.read_state(d)
    assert e.value.field.startswith(field) and e.value.file.endswith("state.json")


def test_the_run_directory_writers_replace_planted_links(tmp_path, victim):
    from pathlib import Path

    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode
    from yatt.exec.recorder import Recorder
    from yatt.exec.runner import _write_run_files

    plan = make_plan(load_experiment(Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml"),
                     Mode.COLOCATE)
    out = tmp_path / "run"
    out.mkdir()
    names = ("trace.jsonl", "timeline.json", "plan.yaml", "metrics.csv", "learning.png", "run.json")
    for n in names:
        os.symlink(victim, out / n)
        os.symlink(tmp_path / "never", out / f"{n}.tmp")
    _write_run_files(plan, out, steps=2, seed=0, controllers=1)
    Recorder(plan, 0).write(out, 2)
    assert victim.read_text() == "keep me\n" and not (tmp_path / "never").exists()
    assert all(not (out / n).is_symlink() for n in names)


def test_overhead_is_step_time_outside_every_traced_phase():
    from pathlib import Path

    from yatt.core.config import load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode, Phase, Role
    from yatt.exec.recorder import Recorder

    plan = make_plan(load_experiment(Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml"),
                     Mode.COLOCATE)
    rec = Recorder(plan, 0, t0=100.0)
    # step 0 runs 100.0-110.0: rollout 1-4, overlapping GenRM 3-5, train 6-9; a span of
    # step 1 and the part of a span outside the window do not count
    rec.span(0, Role.ROLLOUT, Phase.ROLLOUT, (0,), 101.0, 104.0)
    rec.span(0, Role.GENRM, Phase.GENRM, (1,), 103.0, 105.0)
    rec.span(0, Role.TRAINER, Phase.TRAIN, (0,), 106.0, 112.0)
    rec.span(1, Role.TRAINER, Phase.TRAIN, (0,), 105.0, 106.0)
    assert rec.busy_s(0, 0.0, 10.0) == pytest.approx(8.0)
    row = rec.step_metrics(0, {"step_s": 10.0}, start=100.0)
    assert row["overhead_s"] == pytest.approx(2.0) and row["overhead_frac"] == pytest.approx(0.2)
    assert "overhead_s" not in rec.step_metrics(1, {"step_s": 1.0})   # no start: not measured

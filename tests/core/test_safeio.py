"""Outputs are written through `yatt.core.safeio`: never through a link, never half a file,
and an unwritable output or an output that is an input is refused before work."""
from __future__ import annotations

import os

import pytest

from yatt.core import safeio
from yatt.core.config import dump_yaml
from yatt.core.errors import InputError


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("keep me\n")
    return v


def test_a_link_at_the_target_is_replaced_not_written_through(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "plan.yaml")
    os.symlink(tmp_path / "never", out / "plan.yaml.tmp")   # the old fixed temp name
    dump_yaml({"a": 1}, out / "plan.yaml")
    assert victim.read_text() == "keep me\n" and not (tmp_path / "never").exists()
    assert not (out / "plan.yaml").is_symlink() and "a: 1" in (out / "plan.yaml").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["plan.yaml", "plan.yaml.tmp"]


def test_a_failed_write_leaves_the_target_as_it_was(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("old\n")
    with pytest.raises(RuntimeError):
        with safeio.atomic_write(p) as f:
            f.write("half")
            raise RuntimeError("crash")
    assert p.read_text() == "old\n" and [q.name for q in tmp_path.iterdir()] == ["x.txt"]


def test_ensure_dir_refuses_a_link_below_the_root(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "run" / "checkpoints")
    with pytest.raises(InputError, match="is a link"):
        safeio.ensure_dir(tmp_path / "run" / "checkpoints" / "step-1", tmp_path / "run")


@pytest.mark.parametrize("target, why", [("/dev/null", "not a directory"), ("/proc/self", "cannot write"),
                                         ("FILE", "not a directory")])
def test_check_out_dir(tmp_path, target, why):
    if target == "FILE":
        target = tmp_path / "f"
        target.write_text("")
    with pytest.raises(InputError, match=why) as e:
        safeio.check_out_dir(target)
    assert e.value.field == "--out"


def test_check_out_dir_creates_and_leaves_it_empty(tmp_path):
    d = safeio.check_out_dir(tmp_path / "a" / "b")
    assert d.is_dir() and not any(d.iterdir())


def test_an_output_that_is_an_input_is_refused_through_links(tmp_path):
    t = tmp_path / "trace.jsonl"
    t.write_text("{}\n")
    os.symlink(t, tmp_path / "alias.jsonl")
    for out in (t, tmp_path / "alias.jsonl", tmp_path / "sub" / ".." / "trace.jsonl"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(InputError, match="is also an input"):
            safeio.check_out_file(out, [t])
    safeio.check_out_file(tmp_path / "profile.yaml", [t])   # a fresh file is fine


def test_read_at_most_stops_past_the_limit(tmp_path):
    p = tmp_path / "big"
    with open(p, "wb") as f:
        f.truncate(50 << 20)
    assert len(safeio.read_at_most(p, 1000)) == 1001
    assert safeio.read_at_most(p, 100 << 20) == bytes(50 << 20)

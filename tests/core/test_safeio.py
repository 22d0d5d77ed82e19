"""Outputs are written through `yatt.core.safeio`: never through a link, never half a file,
and an unwritable output or an output that is an input is refused before work."""
from __future__ import annotations

import os

import pytest

from yatt.core import safeio
from yatt.core.config import dump_yaml
from yatt.core.errors import InputError


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


def test_check_new_dir_refuses_links_files_and_full_dirs_before_work(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "link")
    full = tmp_path / "full"
    full.mkdir()
    (full / "f").write_text("x")
    (tmp_path / "file").write_text("x")
    for name, why in (("link", "is a link"), ("full", "not an empty directory"),
                      ("file", "not an empty directory")):
        with pytest.raises(InputError, match=why) as e:
            safeio.check_new_dir(tmp_path / name, field="-o")
        assert e.value.field == "-o"
    with pytest.raises(InputError, match="cannot write there") as e:
        safeio.check_new_dir("/proc/self/hf", field="-o")
    assert e.value.file == "/proc/self/hf"
    (tmp_path / "empty").mkdir()
    safeio.check_new_dir(tmp_path / "empty")
    safeio.check_new_dir(tmp_path / "a" / "new")      # its parent is made, the target is not
    assert (tmp_path / "a").is_dir() and not (tmp_path / "a" / "new").exists()
    assert list(elsewhere.iterdir()) == []


def test_a_private_dir_is_published_whole_and_never_onto_a_link(tmp_path, victim):
    tmp = safeio.new_private_dir(tmp_path, "hf")
    assert (tmp.stat().st_mode & 0o777) == 0o700 and tmp.name.startswith(".hf.")
    safeio.write_text(tmp / "config.json", "{}")
    out = safeio.publish_dir(tmp, tmp_path / "hf")
    assert (out / "config.json").read_text() == "{}" and not tmp.exists()
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask   # a new directory's, not 0700
    tmp2 = safeio.new_private_dir(tmp_path, "hf2")
    os.symlink(victim.parent / "elsewhere", tmp_path / "hf2")
    with pytest.raises(OSError):
        safeio.publish_dir(tmp2, tmp_path / "hf2")
    assert tmp2.is_dir() and os.path.islink(tmp_path / "hf2")


def test_check_out_dir_without_create_makes_nothing(tmp_path):
    safeio.check_out_dir(tmp_path / "a" / "b", field="log.tensorboard", create=False)
    assert not (tmp_path / "a").exists()
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        safeio.check_out_dir(tmp_path / "f" / "b", field="log.tensorboard", create=False)
    with pytest.raises(InputError, match="cannot write there"):
        safeio.check_out_dir("/proc/self/tb", field="log.tensorboard", create=False)


def test_read_text_at_most_and_copy_file(tmp_path, victim, monkeypatch):
    p = tmp_path / "t.txt"
    p.write_text("hello")
    assert safeio.read_text_at_most(p) == "hello"
    monkeypatch.setenv("YATT_CONFIG_MAX_BYTES", "4")
    with pytest.raises(InputError, match="larger than 4 bytes; allowed: a smaller file, or raise "
                                         "YATT_CONFIG_MAX_BYTES") as e:
        safeio.read_text_at_most(p, field="genrm_judge.template_file")
    assert e.value.field == "genrm_judge.template_file"
    monkeypatch.delenv("YATT_CONFIG_MAX_BYTES")
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9")
    with pytest.raises(InputError, match="not a UTF-8 text file"):
        safeio.read_text_at_most(tmp_path / "bad.txt")
    os.symlink(victim, tmp_path / "copy.txt")
    safeio.copy_file(p, tmp_path / "copy.txt")
    assert victim.read_text() == "keep me\n" and (tmp_path / "copy.txt").read_text() == "hello"
    assert not os.path.islink(tmp_path / "copy.txt")

"""The user's prompts (yatt/exec/data.py): every file format through the real readers,
chat templates and system prompts through a real tokenizer, the prompt cap, one-line
errors naming file and row, and the order invariants (each row once per epoch; the order
after a resume is the order of an unbroken run)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")
pytest.importorskip("pyarrow")

from yatt.core.errors import InputError  # noqa: E402
from yatt.core.jobspec import DataSpec, OnLong  # noqa: E402
from yatt.core.specs import Workload  # noqa: E402
from yatt.exec.data import (DataOrder, PromptEncoder, TableSource, check_resume_position,  # noqa: E402
                            load_table, steps_check)
from yatt.exec.dataset_files import read_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"q": f"What is {i} plus {i}?", "a": str(2 * i), "topic": "add"} for i in range(6)]
CHATML = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    from yatt.exec.hf_model import build_tokenizer
    d = tmp_path_factory.mktemp("tok")
    build_tokenizer(d)
    return AutoTokenizer.from_pretrained(str(d))


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _spec(train, **kw):
    return DataSpec(train=train, prompt_key="q", answer_key="a", **kw)


def test_every_format_reads_the_same_rows(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    a = _jsonl(tmp_path / "d.jsonl", ROWS)
    (tmp_path / "d.json").write_text(json.dumps(ROWS))
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    for p in (a, tmp_path / "d.json", tmp_path / "d.parquet", tmp_path / "saved"):
        assert read_rows(str(p)) == ROWS, p


@pytest.mark.parametrize("name,content,match", [
    ("empty.jsonl", b"", "empty.jsonl: no rows"),
    ("latin1.jsonl", b'{"q": "ok"}\n{"q": "caf\xe9"}\n', "latin1.jsonl: line 2: not UTF-8"),
    ("broken.jsonl", b'{"q": "ok"}\n{"q": \n', "broken.jsonl: not JSON lines"),
    ("rows.csv", b"q\nhi\n", "got a .csv file; allowed: .jsonl, .json, .parquet"),
    ("list.json", b'{"q": 1}', "got a JSON dict; allowed: a list of objects"),
])
def test_unreadable_files_are_one_line(tmp_path, name, content, match):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(InputError, match=match) as e:
        read_rows(str(tmp_path / name))
    assert "\n" not in str(e.value)


def test_datasets_past_the_caps_are_refused_unread(tmp_path, monkeypatch):
    """YATT_DATA_MAX_BYTES bounds the file, a save_to_disk directory's files and a parquet
    file's decoded table; MAX_DATASET_ROWS bounds the rows; one line names the knob."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    import yatt.exec.dataset_files as dataset_files

    big = [{"q": "x" * 1000, "a": "1"} for _ in range(50)]   # ~50 KB of text
    _jsonl(tmp_path / "d.jsonl", big)
    (tmp_path / "d.json").write_text(json.dumps(big))
    # dictionary-encoded and compressed: ~1 KB on disk, ~50 KB decoded
    pq.write_table(pa.Table.from_pylist(big), tmp_path / "d.parquet", compression="zstd")
    assert (tmp_path / "d.parquet").stat().st_size < 10_000
    datasets.Dataset.from_list(big).save_to_disk(str(tmp_path / "saved"))
    monkeypatch.setenv("YATT_DATA_MAX_BYTES", "20000")
    for name, what in (("d.jsonl", "the file"), ("d.json", "the file"),
                       ("d.parquet", "its decoded table"), ("saved", "the directory's files")):
        with pytest.raises(InputError, match=f"{name}: {what} is larger than 20,000 bytes; "
                                             "allowed: a smaller dataset, or raise "
                                             "YATT_DATA_MAX_BYTES") as e:
            read_rows(str(tmp_path / name))
        assert "\n" not in str(e.value)
    monkeypatch.delenv("YATT_DATA_MAX_BYTES")
    monkeypatch.setattr(dataset_files, "MAX_DATASET_ROWS", 49)
    for name in ("d.jsonl", "d.json", "d.parquet", "saved"):
        with pytest.raises(InputError, match="50 rows; allowed: at most 49 rows"):
            read_rows(str(tmp_path / name))


def test_a_chat_template_file_past_the_config_cap_is_refused(tmp_path, tok, monkeypatch):
    t = tmp_path / "template.jinja"
    t.write_text(CHATML)
    monkeypatch.setenv("YATT_CONFIG_MAX_BYTES", "20")
    with pytest.raises(InputError, match="larger than 20 bytes.*YATT_CONFIG_MAX_BYTES") as e:
        PromptEncoder(tok, _spec("x.jsonl", chat_template=str(t)))
    assert e.value.field == "data.chat_template"


def test_missing_prompt_column_names_file_row_and_key(tmp_path, tok):
    p = _jsonl(tmp_path / "d.jsonl", ROWS[:2] + [{"question": "x", "a": "1"}])
    with pytest.raises(InputError, match=r"d.jsonl: row 2: no 'q' column \(columns: a, question\)"):
        load_table(p, _spec(p), PromptEncoder(tok, _spec(p)), 64, "data.train")


def test_string_and_chat_prompts_render_with_template_system_and_bos(tmp_path, tok):
    tpl = tmp_path / "chat.jinja"
    tpl.write_text(CHATML)
    spec = DataSpec(train="x.jsonl", chat_template=str(tpl), system_prompt="be brief")
    enc = PromptEncoder(tok, spec)
    text = enc.text("hi", "t")
    assert text == "<|system|>be brief\n<|user|>hi\n<|assistant|>"
    assert enc.text([{"role": "user", "content": "hi"}], "t") == text
    ids = enc.ids("hi", "t")
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    plain = PromptEncoder(tok, DataSpec(train="x.jsonl", chat_template="none", system_prompt="s"))
    assert plain.text("hi", "t") == "s\nhi"
    with pytest.raises(InputError, match="a chat-message prompt needs a chat template"):
        plain.ids([{"role": "user", "content": "hi"}], "t")
    with pytest.raises(InputError, match=r"row 3: got 7; allowed: a string or a list"):
        plain.ids(7, "row 3")


@pytest.mark.parametrize("on_long", list(OnLong))
def test_prompt_cap(tmp_path, tok, on_long):
    rows = ROWS[:3] + [{"q": "x" * 100, "a": "1"}]
    p = _jsonl(tmp_path / "d.jsonl", rows)
    spec = _spec(p, on_long=on_long)
    enc = PromptEncoder(tok, spec)
    cap = max(len(enc.ids(r["q"], "")) for r in rows[:3])
    if on_long is OnLong.FAIL:
        with pytest.raises(InputError, match=rf"row 3: the prompt is 101 tokens, over the cap of {cap}"):
            load_table(p, spec, enc, cap, "data.train")
        return
    t = load_table(p, spec, enc, cap, "data.train")
    assert t.longest <= cap
    assert (len(t), t.dropped, t.truncated) == ((3, 1, 0) if on_long is OnLong.DROP else (4, 0, 1))
    assert t.rows[0] == {"a": "0", "topic": "add"} and t.answer(1, "a") == "2"


def test_all_rows_over_the_cap_is_an_error(tmp_path, tok):
    p = _jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(InputError, match="every one of its 6 prompts is over the cap of 2"):
        load_table(p, _spec(p), PromptEncoder(tok, _spec(p)), 2, "data.train")


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 40), per_step=st.integers(1, 12), seed=st.one_of(st.none(), st.integers(0, 2**31)),
       epochs=st.integers(1, 4))
def test_each_row_once_per_epoch(rows, per_step, seed, epochs):
    order = DataOrder(rows, per_step, seed, epochs)
    steps = order.steps_available
    stream = [i for s in range(steps) for i in order.indices(s)]
    assert len(stream) == steps * per_step <= epochs * rows
    for e in range(epochs):
        chunk = stream[e * rows:(e + 1) * rows]
        assert len(set(chunk)) == len(chunk)              # no row twice within an epoch
        if len(chunk) == rows:
            assert sorted(chunk) == list(range(rows))     # a whole epoch uses every row
    if seed is None:
        assert stream[:rows] == list(range(min(rows, len(stream))))[:rows]


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(1, 30), per_step=st.integers(1, 8), seed=st.integers(0, 1000),
       cut=st.integers(0, 20), more=st.integers(1, 10))
def test_resumed_order_continues_the_unbroken_one(rows, per_step, seed, cut, more):
    """A resumed run rebuilds the order from the spec and continues at the checkpoint's
    step: it must take exactly the rows the unbroken run takes."""
    unbroken = DataOrder(rows, per_step, seed)
    resumed = DataOrder(rows, per_step, seed)
    pos = unbroken.position(cut)
    assert pos["rows_used"] == cut * per_step and pos["epoch"] * rows + pos["offset"] == cut * per_step
    assert [resumed.indices(s) for s in range(cut, cut + more)] == \
        [unbroken.indices(s) for s in range(cut, cut + more)]


def test_source_prompts_resume_check_and_epoch_limit(tmp_path, tok):
    p = _jsonl(tmp_path / "d.jsonl", ROWS)
    spec = _spec(p, epochs=1)
    enc = PromptEncoder(tok, spec)
    src = TableSource(spec, load_table(p, spec, enc, 64, "data.train"), None, 2)
    wl = Workload(prompts_per_step=2, samples_per_prompt=2)
    first = src.prompts(0, 0, wl)
    assert [x.prompt_id for x in first] == [0, 1] and first[0].where.endswith("d.jsonl row " + str(src.order.indices(0)[0]))
    assert first[0].row["topic"] == "add" and first[0].answer == str(2 * src.order.indices(0)[0])
    steps_check(src, 3)
    with pytest.raises(InputError, match=r"cover 3 steps of 2 prompts; allowed: --steps <= 3"):
        steps_check(src, 4)
    saved = src.position(2)
    check_resume_position(saved, src, 2)
    _jsonl(tmp_path / "d.jsonl", ROWS[::-1])
    changed = TableSource(spec, load_table(p, spec, enc, 64, "data.train"), None, 2)
    with pytest.raises(InputError, match="data: the checkpoint was trained on fingerprint"):
        check_resume_position(saved, changed, 2)


@pytest.mark.parametrize("key,package", [("wandb", "wandb"), ("mlflow", "mlflow")])
def test_trackers_that_are_not_installed_are_refused(key, package, tmp_path):
    """log.wandb / log.mlflow only when the package is there: otherwise one line, before
    anything starts (job.prepare_job)."""
    import dataclasses
    import importlib.util
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    from yatt.core.config import load_experiment
    from yatt.core.jobspec import LogSpec
    from yatt.exec.job import prepare_job
    exp = load_experiment(ROOT / "configs" / "demo-learn.yaml")
    exp = dataclasses.replace(exp, log=LogSpec(**{key: str(tmp_path)}))
    with pytest.raises(InputError, match=rf"log.{key}: needs the {package} package, which is not "
                                         "installed"):
        prepare_job(exp, 0, 2)


def test_an_unwritable_tensorboard_dir_is_refused_before_anything_starts(tmp_path):
    """log.tensorboard is proven writable by the job's check (nothing created there yet)."""
    import dataclasses
    import importlib.util
    if importlib.util.find_spec("tensorboardX") is None:
        pytest.skip("tensorboardX is not installed here")
    from yatt.core.config import load_experiment
    from yatt.core.jobspec import LogSpec
    from yatt.exec.job import prepare_job
    exp = load_experiment(ROOT / "configs" / "demo-learn.yaml")
    (tmp_path / "a-file").write_text("x")
    for target, why in ((tmp_path / "a-file", "exists and is not a directory"),
                        (Path("/proc/self/tb"), "cannot write there")):
        bad = dataclasses.replace(exp, log=LogSpec(tensorboard=str(target)))
        with pytest.raises(InputError, match=why) as e:
            prepare_job(bad, 0, 2)
        assert e.value.field == "log.tensorboard"
    ok = dataclasses.replace(exp, log=LogSpec(tensorboard=str(tmp_path / "tb" / "run")))
    prepare_job(ok, 0, 2)
    assert not (tmp_path / "tb").exists()    # made when the run starts, not by the check

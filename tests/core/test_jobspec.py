"""The job sections of an experiment file (core/jobspec.py, core/config.py): defaults that
keep the arith demo as it was, paths made absolute against the experiment file, the judge
template read from its file, a model given as a Hugging Face directory, and the rule a
reward source needs."""
from __future__ import annotations

import json

import pytest

from yatt.core.config import load_experiment
from yatt.core.errors import InputError
from yatt.core.jobspec import BuiltinData, BuiltinReward, DataSpec, OnLong
from yatt.core.roles import RewardSource

HEAD = """name: t
cluster: {gpu: cpu-local, nodes: 1, gpus_per_node: 2}
actor: model
workload: {prompts_per_step: 2, samples_per_prompt: 2}
"""


@pytest.fixture
def exp_dir(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 128,
        "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 64, "tie_word_embeddings": True}))
    (tmp_path / "judge.txt").write_text("Q: {prompt}\nA: {response}\nRef: {answer}\n")
    return tmp_path


def _load(d, body):
    (d / "exp.yaml").write_text(HEAD + body)
    return load_experiment(d / "exp.yaml")


def test_defaults_are_the_arith_demo(exp_dir):
    e = _load(exp_dir, "algo: {reward: rule}\n")
    assert e.data.builtin is BuiltinData.ARITH and e.rule_reward is BuiltinReward.FIRST_INTEGER
    assert e.actor.hf_path == str((exp_dir / "model").resolve()) and e.actor.heads == 4


def test_paths_are_absolute_and_the_template_is_inlined(exp_dir):
    e = _load(exp_dir, """genrm: model
algo: {reward: weighted}
data: {train: d/train.jsonl, eval: d/eval.parquet, chat_template: t.jinja, answer_key: a,
       on_long: truncate}
reward: {function: "r.py:score"}
genrm_judge: {template_file: judge.txt, parser: yes_no}
log: {tensorboard: tb}
""")
    assert e.data.train == str(exp_dir / "d" / "train.jsonl")
    assert e.data.eval == str(exp_dir / "d" / "eval.parquet")
    assert e.data.chat_template == str(exp_dir / "t.jinja") and e.data.on_long is OnLong.TRUNCATE
    assert e.reward.function == f"{exp_dir / 'r.py'}:score"
    assert e.genrm_judge.template.startswith("Q: {prompt}") and e.log.tensorboard == str(exp_dir / "tb")
    assert e.algo.reward is RewardSource.WEIGHTED and e.algo.reward.needs_genrm


@pytest.mark.parametrize("body,match", [
    ("data: {}\n", "data.train: missing train"),
    ("data: {train: x.jsonl, eval_every: 2}\n", "data.eval_every: eval_every needs an eval set"),
    ("data: {train: x.jsonl, shuffle_seed: -1}\n", "data.shuffle_seed: got -1"),
    ("algo: {reward: rule}\ndata: {train: x.jsonl}\n", "reward: algo.reward is 'rule' but there is no rule"),
    ("algo: {reward: weighted}\ndata: {train: x.jsonl, answer_key: a}\n", "genrm: algo.reward is 'weighted'"),
    ("genrm_judge: {template: x, template_file: judge.txt}\n", "give either template or template_file"),
    ("reward: {function: f, builtin: math}\n", "reward.function: give either function or builtin"),
    ("dtype: float16\n", "dtype: got 'float16'; allowed: one of float32|bfloat16"),
])
def test_bad_sections_are_one_line(exp_dir, body, match):
    with pytest.raises(InputError, match=match) as e:
        _load(exp_dir, body)
    assert "\n" not in e.value.one_line() and "exp.yaml" in e.value.one_line()


def test_a_non_llama_style_config_says_its_type(exp_dir):
    (exp_dir / "model" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    with pytest.raises(InputError, match="model_type 'gpt2': not a Qwen2/Llama-style"):
        _load(exp_dir, "")


def test_answer_key_must_differ_from_prompt_key():
    with pytest.raises(InputError, match="answer_key"):
        DataSpec(train="x.jsonl", prompt_key="q", answer_key="q")

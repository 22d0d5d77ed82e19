"""Before any worker starts: check the user's job and derive what the engines need.

Why: a bad dataset, reward function, judge template or model directory must be refused
in one line (exit 2) before Ray, vLLM and Megatron spend a minute starting, and the
numbers the engines need (context length, stop tokens, pad token, the judge's budget) come
from the user's models and data, not from constants. `prepare_job` does both, once, in
the driver; the result (`Job`) is handed to the runner and its controllers.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from yatt.core.errors import InputError
from yatt.core.jobspec import BuiltinReward, ChatTemplate, Dtype
from yatt.core.plan import Experiment
from yatt.core.roles import DistKind
from yatt.core.specs import LengthDist

from .data import (ArithSource, PromptEncoder, PromptSource, PromptTable, TableSource,
                   load_table, steps_check)

# model_type -> what users call it. Megatron's local layer spec covers these (GQA, SwiGLU,
# RMSNorm; Qwen2's q/k/v biases; Qwen3's per-head q/k RMSNorm).
SUPPORTED = {"qwen2": "Qwen2/Qwen2.5", "llama": "Llama 3.x", "qwen3": "Qwen3"}
# Llama 3.1+ context extension: Megatron's implementation fixes these three.
_LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}


def read_hf_config(path: str | Path, field_name: str) -> dict:
    p = Path(path) / "config.json"
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError("not a Hugging Face model directory (no config.json)",
                         file=str(path), field=field_name) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"invalid JSON ({type(e).__name__})", file=str(p), field=field_name) from None


def check_architecture(path: str | Path, field_name: str) -> dict:
    """config.json of a supported model, else one line naming its architecture."""
    cfg = read_hf_config(path, field_name)
    mt = cfg.get("model_type")
    if mt not in SUPPORTED:
        arch = ", ".join(cfg.get("architectures") or []) or "unknown"
        raise InputError(f"architecture {arch} (model_type {mt!r}) is not supported; allowed: "
                         + ", ".join(SUPPORTED.values()), file=str(Path(path) / "config.json"),
                         field=field_name)
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "llama3" and mt == "llama":
        bad = {k: rope.get(k) for k, v in _LLAMA3_ROPE.items() if float(rope.get(k, v)) != v}
        if bad:
            raise InputError(f"llama3 rope scaling with {bad} is not supported; allowed: "
                             f"{_LLAMA3_ROPE}", file=str(Path(path) / "config.json"),
                             field=field_name)
    elif kind not in ("default", None):
        raise InputError(f"rope scaling {kind!r} is not supported; allowed: default, llama3 "
                         "(Llama 3.1+)", file=str(Path(path) / "config.json"), field=field_name)
    return cfg


def stop_ids(path: str | Path, tok: Any, field_name: str) -> tuple[int, ...]:
    """The ids that end a response: generation_config.json's eos_token_id (one or a list),
    else the tokenizer's EOS."""
    p = Path(path) / "generation_config.json"
    eos: Any = None
    if p.is_file():
        try:
            eos = json.loads(p.read_text()).get("eos_token_id")
        except ValueError:
            raise InputError("invalid JSON", file=str(p), field=field_name) from None
    if eos is None:
        eos = tok.eos_token_id
    ids = tuple(int(x) for x in (eos if isinstance(eos, list) else [eos]) if x is not None)
    if not ids:
        raise InputError("the model has no EOS token (generation_config.json eos_token_id, "
                         "or the tokenizer's eos_token); allowed: a model that can end a "
                         "response", file=str(path), field=field_name)
    return ids


@dataclass(frozen=True)
class Job:
    """What the runner needs from the user's models and data (see module doc)."""

    actor_path: str
    genrm_path: str
    source: PromptSource
    prompt_cap: int                  # longest prompt, tokens (BOS and chat template included)
    response_cap: int                # the workload's response budget cap
    actor_stop: tuple[int, ...]
    pad_id: int
    genrm_stop: tuple[int, ...] = ()
    judge_max_tokens: int = 0
    judge_prompt_cap: int = 0
    dtype: Dtype = Dtype.FLOAT32     # what runs (bfloat16 asked on CPU runs float32)
    notes: tuple[str, ...] = ()      # one line each, for the log
    reward_fn: Optional[Callable[..., Any]] = field(default=None, compare=False)
    prompt_lengths: tuple[int, ...] = ()   # the train prompts' token counts (empty: arith)

    @property
    def max_model_len(self) -> int:
        return self.prompt_cap + self.response_cap

    @property
    def genrm_max_model_len(self) -> int:
        return self.judge_prompt_cap + self.judge_max_tokens


def _tokenizer(path: str, field_name: str):
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - whatever the directory lacks
        raise InputError(f"cannot load its tokenizer ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:160]})", file=path, field=field_name) from None


def prompt_len_dist(job: Job, cap: int) -> Optional[LengthDist]:
    """The train prompts' token lengths as the simulator's distribution (a histogram), for
    planning with the real data; None for the built-in task."""
    if not job.prompt_lengths:
        return None
    counts: dict[int, int] = {}
    for n in job.prompt_lengths:
        counts[n] = counts.get(n, 0) + 1
    values = tuple(sorted(counts))
    return LengthDist(DistKind.EMPIRICAL, min=1, max=max(cap, values[-1]), values=values,
                      weights=tuple(float(counts[v]) for v in values))


def prepare_job(exp: Experiment, seed: int, steps: int, cpu: bool = True,
                reward_fn: Optional[Callable[..., Any]] = None) -> Job:
    """Check the experiment's models, data, reward and judge; raise InputError (one line)
    for the first problem; return the engines' numbers."""
    from .models import resolve_model
    from .reward import resolve

    wl = exp.workload
    actor = str(resolve_model(exp.actor, seed))
    acfg = check_architecture(actor, "actor")
    tok = _tokenizer(actor, "actor")
    enc = PromptEncoder(tok, exp.data)
    response_cap = wl.response_len.upper()
    notes: list[str] = []
    answers: list[str] = []
    lengths: tuple[int, ...] = ()
    if exp.data.builtin is not None:
        arith = ArithSource(enc)
        source: PromptSource = arith
        prompt_cap = arith.cap()
    else:
        cap = exp.data.max_prompt_len or wl.prompt_len.upper()
        train = load_table(exp.data.train, exp.data, enc, cap, "data.train")
        evals: Optional[PromptTable] = (load_table(exp.data.eval, exp.data, enc, cap, "data.eval")
                                        if exp.data.eval else None)
        source = TableSource(exp.data, train, evals, wl.prompts_per_step)
        prompt_cap = max(t.longest for t in (train, evals) if t is not None)
        lengths = tuple(len(x) for x in train.ids)
        for t in (train, evals):
            if t is not None and (t.dropped or t.truncated):
                notes.append(f"{t.path}: {t.dropped} prompts over {cap} tokens dropped, "
                             f"{t.truncated} truncated (data.max_prompt_len, data.on_long)")
            if t is not None and exp.data.answer_key:
                answers += [t.answer(i, exp.data.answer_key) or "" for i in range(len(t))]
    steps_check(source, steps)
    limit = acfg.get("max_position_embeddings")
    if limit and prompt_cap + response_cap > int(limit):
        raise InputError(f"prompts up to {prompt_cap} tokens plus responses up to "
                         f"{response_cap} exceed the model's {limit} positions; allowed: a "
                         "smaller data.max_prompt_len or workload.response_len",
                         field="workload.response_len")
    if reward_fn is None and exp.rule_reward is not None:
        resolve(exp.rule_reward, "reward.builtin" if isinstance(exp.rule_reward, BuiltinReward)
                else "reward.function")
    for key, package in (("tensorboard", "tensorboardX"), ("wandb", "wandb"), ("mlflow", "mlflow")):
        if getattr(exp.log, key) and importlib.util.find_spec(package) is None:
            raise InputError(f"needs the {package} package, which is not installed; allowed: "
                             f"pip install {package}, or drop log.{key}", field=f"log.{key}")
    dtype = exp.dtype
    if dtype is Dtype.BFLOAT16 and cpu:
        dtype = Dtype.FLOAT32
        notes.append("dtype bfloat16 runs as float32 on CPU (vLLM-CPU and Megatron on CPU are "
                     "slower or unsupported in bf16; docs/own-job.md)")
    job = dict(actor_path=actor, source=source, prompt_cap=prompt_cap, response_cap=response_cap,
               actor_stop=stop_ids(actor, tok, "actor"),
               pad_id=tok.pad_token_id if tok.pad_token_id is not None else stop_ids(actor, tok, "actor")[0],
               dtype=dtype, notes=tuple(notes), reward_fn=reward_fn, genrm_path="",
               prompt_lengths=lengths)
    if exp.algo.reward.needs_genrm:
        job.update(_judge_numbers(exp, seed, actor, tok, prompt_cap, response_cap, answers))
    return Job(**job)


def _judge_numbers(exp: Experiment, seed: int, actor: str, actor_tok: Any, prompt_cap: int,
                   response_cap: int, answers: list[str]) -> dict:
    """The GenRM's path, stop ids, verdict budget and judging-prompt cap: the template's
    own tokens (chat-wrapped, measured) plus the prompt and response (the actor's tokens;
    twice that when the GenRM tokenizes differently) plus the longest answer."""
    from .genrm import judge_ids
    from .models import resolve_model

    genrm = str(resolve_model(exp.genrm, seed))
    gcfg = check_architecture(genrm, "genrm")
    gtok = _tokenizer(genrm, "genrm")
    spec = exp.genrm_judge
    chat = ((getattr(gtok, "chat_template", None) or None)
            if spec.chat_template is ChatTemplate.AUTO else None)
    overhead = len(judge_ids(gtok, spec.template, chat, "", "", ""))
    same = _same_tokenizer(actor, genrm)
    answer_cap = max((len(gtok.encode(a, add_special_tokens=False)) for a in answers), default=0)
    prompt_part = (prompt_cap + response_cap) * (1 if same else 2)
    judge_cap = overhead + prompt_part + answer_cap
    max_tokens = spec.max_tokens or exp.workload.judge_max_tokens
    limit = gcfg.get("max_position_embeddings")
    if limit and judge_cap + max_tokens > int(limit):
        judge_cap = int(limit) - max_tokens    # longer judging prompts are cut (genrm.py)
    return dict(genrm_path=genrm, genrm_stop=stop_ids(genrm, gtok, "genrm"),
                judge_max_tokens=max_tokens, judge_prompt_cap=judge_cap)


def _same_tokenizer(a: str, b: str) -> bool:
    fa, fb = Path(a) / "tokenizer.json", Path(b) / "tokenizer.json"
    return fa.is_file() and fb.is_file() and fa.read_bytes() == fb.read_bytes()

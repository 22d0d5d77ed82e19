"""`yatt demo prepare`: the learning demo's checkpoints, trained offline from a seed.

Why: RL only learns when the policy sometimes succeeds, and a GenRM is only a reward
when it agrees with the truth. A random-init actor never writes a correct sum, and a
random-init GenRM writes noise. This module trains, with plain torch + transformers on
CPU in about a minute:
  * the actor: supervised warm start on the addition task (prompt -> " <sum><eos>"),
    stopped as soon as its expected exact accuracy at temperature 1 (the probability of
    the exact answer string, teacher-forced, averaged over held-out problems) reaches
    `actor_target` (default 0.3), so RL has room to improve it;
  * the GenRM: the actor's shape, initialised from the SFT actor's checkpoint (as reward
    models usually start from the SFT policy), reads the judging template `genrm.TEMPLATE`
    (response first, then the question) and writes " <its sum> <the integer it reads in
    the response> <one =/x mark per digit> score: 1|0". It is trained on balanced rows of
    correct answers and near misses shaped like the SFT actor's own mistakes (mostly off by
    one or ten), now and then with trailing junk, labelled by `task.exact_match`. Its
    agreement with the checker is measured on held-out pairs and on the actor's own samples.
Everything is seeded (single-threaded torch), so the same seed gives the same weights.
Checkpoints are HF directories (safetensors + char tokenizer) that vLLM and Megatron load.
The default recipe's checkpoints are also committed under configs/demo-models (1.6 MB
each), because on a busy 2-core box their training takes minutes.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from yatt.core.bundled import bundled
from yatt.core.errors import InputError
from yatt.core.specs import ModelSpec

STAMP = "yatt_demo.json"
# Checkpoints of the default recipe, committed (each < 5 MB) so CI and `yatt run` skip the
# minutes of CPU training; used only when their stamp equals the requested recipe.
def shipped_models() -> Path:
    return bundled("demo-models")


@dataclass(frozen=True)
class PrepConfig:
    seed: int = 0
    actor_target: float = 0.3        # stop the actor's SFT at this expected accuracy (T=1)
    actor_max_steps: int = 3000
    actor_lr: float = 1e-3
    genrm_target: float = 0.95      # stop the GenRM at this all-tokens-right share (held out)
    genrm_steps: int = 1500
    genrm_lr: float = 1e-3
    batch: int = 128
    eval_every: int = 25
    eval_rows: int = 256


@dataclass(frozen=True)
class PrepReport:
    actor_dir: str
    genrm_dir: str
    actor_steps: int
    actor_expected_accuracy: float   # mean P(exact answer) at T=1, held-out problems
    genrm_steps: int
    genrm_agreement: float           # GenRM verdict == exact checker, held-out pairs
    genrm_agreement_on_correct: float
    genrm_agreement_on_wrong: float
    seconds: float


# ---------------------------------------------------------------------------- data
def problem(rng: np.random.Generator) -> tuple[str, str]:
    """One question as `task.step_prompts` writes it, and its answer."""
    a, b = (int(x) for x in rng.integers(10, 99, size=2))
    return f"Q: {a}+{b}= A:", str(a + b)


# Near misses the GenRM must reject, weighted like the SFT actor's own mistakes (sampled
# at T=1 from the committed actor: about half are off by one or by ten, most of the rest
# off by 2-3, 9 or 11, a wrong length, or trailing junk).
_NEAR = (-1, 1, -10, 10, -2, 2, -9, 9, -11, 11, -3, 3, -20, 20, -100, 100)
_NEAR_P = np.array([6, 3, 5, 2, 1.5, 1, 1, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5])
_NEAR_P = _NEAR_P / _NEAR_P.sum()


def wrong_answer(rng: np.random.Generator, answer: str) -> str:
    """A plausible wrong answer: off by a little (mostly 1 or 10, like the actor's own
    misses), a digit changed, digits swapped, a digit dropped or doubled, or random."""
    v = int(answer)
    kind = int(rng.integers(0, 10))
    if kind < 5:
        w = v + int(rng.choice(_NEAR, p=_NEAR_P))
    elif kind < 7:
        d = list(answer)
        i = int(rng.integers(0, len(d)))
        d[i] = str((int(d[i]) + int(rng.integers(1, 10))) % 10)
        w = int("".join(d))
    elif kind == 7 and len(answer) > 1 and answer[-1] != answer[-2]:
        w = int(answer[:-2] + answer[-1] + answer[-2])
    elif kind == 8:
        i = int(rng.integers(0, len(answer)))
        w = int(answer[:i] + answer[i + 1:] if rng.integers(0, 2) and len(answer) > 1
                else answer[:i] + answer[i] + answer[i:])
    else:
        w = int(rng.integers(0, 200))
    return str(w) if w != v and w >= 0 else str(v + 1)


def _encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def _batch(rows: list[tuple[list[int], list[int]]], pad: int):
    """(prompt ids, target ids) -> input ids, labels (-100 outside targets)."""
    import torch

    n = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), n), pad, dtype=torch.long)
    lab = torch.full((len(rows), n), -100, dtype=torch.long)
    for i, (p, t) in enumerate(rows):
        x = p + t
        ids[i, :len(x)] = torch.tensor(x)
        lab[i, len(p) - 1:len(x) - 1] = torch.tensor(t)
    return ids, lab


def _seq_logprob(model, ids, lab):
    """Sum of target-token log-probs per row."""
    logits = model(ids).logits.float()
    lp = logits.log_softmax(-1)
    mask = lab != -100
    g = lp.gather(2, lab.clamp(min=0)[..., None])[..., 0]
    return (g * mask).sum(1), mask


def _train(model, make_rows: Callable[[np.random.Generator], list], pad: int, steps: int, lr: float,
           rng: np.random.Generator, stop: Optional[Callable[[int], bool]] = None,
           every: int = 25) -> int:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    model.train()
    for step in range(1, steps + 1):
        ids, lab = _batch(make_rows(rng), pad)
        logits = model(ids).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 lab.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if stop is not None and step % every == 0:
            model.eval()
            done = stop(step)
            model.train()
            if done:
                return step
    return steps


# ---------------------------------------------------------------------------- actor
def actor_rows(tok, rng: np.random.Generator, n: int) -> list[tuple[list[int], list[int]]]:
    rows = []
    for _ in range(n):
        q, a = problem(rng)
        rows.append(([tok.bos_token_id] + _encode(tok, q), _encode(tok, " " + a) + [tok.eos_token_id]))
    return rows


def actor_expected_accuracy(model, tok, rows) -> float:
    """Mean probability of writing exactly ' <sum><eos>' at temperature 1."""
    import torch

    with torch.no_grad():
        ids, lab = _batch(rows, tok.pad_token_id)
        lp, _ = _seq_logprob(model, ids, lab)
    return float(lp.exp().mean())


def actor_greedy_accuracy(model, tok, rows) -> float:
    """Share of problems whose every answer token is the argmax (teacher-forced greedy)."""
    import torch

    with torch.no_grad():
        ids, lab = _batch(rows, tok.pad_token_id)
        pred = model(ids).logits.argmax(-1)
    mask = lab != -100
    return float(((pred == lab) | ~mask).all(1).float().mean())


# ---------------------------------------------------------------------------- GenRM
def judge_text(question: str, response: str) -> str:
    """The GenRM's input text, exactly as `GenRMServer` builds it (response decoded with
    its leading space)."""
    from yatt.exec.genrm import TEMPLATE

    return TEMPLATE.format(prompt=question, response=response)


def read_answer(response: str) -> str:
    """The integer the exact checker reads in a response (its first one), or 'none'."""
    from yatt.exec.task import first_integer

    got = first_integer(response)
    return got if got is not None else "none"


WIDTH = 3     # sums are < 200: every number the GenRM writes is padded to 3 characters


def field(number: str) -> str:
    """A number as the GenRM writes it: right-aligned in WIDTH characters padded with '.',
    or '???' when it does not fit (a longer number, or no number: 'none')."""
    return number.rjust(WIDTH, ".") if number != "none" and len(number) <= WIDTH else "?" * WIDTH


def marks(answer: str, read: str) -> str:
    """One mark per column of the two fields: '=' where they agree, 'x' where not."""
    return "".join("=" if x == y else "x" for x, y in zip(field(answer), field(read)))


def verdict(answer: str, read: str, score: int) -> str:
    """What the GenRM writes (then <eos>): its own sum of the question, the integer it reads
    in the response, a column-by-column comparison of the two, then the verdict, e.g.
    " .46 .47 ==x score: 0". With fixed-width fields each mark compares two characters a
    fixed distance back (4 and 8 tokens), whatever the numbers, so every step is a small
    local rule (add; copy; compare; 'all marks are =') that the 2-layer model learns in a
    few hundred steps; a bare verdict, or sum then verdict, stayed lenient after far more.
    `ScoreParser` reads the `score` pair; nothing before it is a `name: value` pair."""
    return f" {field(answer)} {field(read)} {marks(answer, read)} score: {score}"


def candidate(rng: np.random.Generator, answer: str, good: bool) -> str:
    """A response as the run decodes it (leading space): the answer or a near miss, now and
    then with trailing junk (the actor writes some), rarely no number at all."""
    r = " " + (answer if good else wrong_answer(rng, answer))
    u = rng.random()
    if u < 0.06:
        r += "".join(rng.choice(list("0123456789x +=AQ:"), size=int(rng.integers(1, 4))))
    elif u < 0.08 and not good:
        r = " " + "".join(rng.choice(list("xAQ:= +"), size=int(rng.integers(1, 4))))
    return r


def genrm_rows(tok, rng: np.random.Generator, n: int) -> list[tuple[list[int], list[int]]]:
    """Balanced judging rows: even rows hold a correct answer, odd rows a near miss; the
    label is the exact checker's verdict on the response as written."""
    from yatt.exec.task import exact_match

    rows = []
    for i in range(n):
        q, a = problem(rng)
        r = candidate(rng, a, i % 2 == 0)
        score = int(exact_match(a, r))
        rows.append(([tok.bos_token_id] + _encode(tok, judge_text(q, r)),
                     _encode(tok, verdict(a, read_answer(r), score)) + [tok.eos_token_id]))
    return rows


def genrm_agreement(model, tok, rows) -> tuple[float, float, float]:
    """Share of held-out pairs the GenRM judges right greedily: every token of its verdict
    (its sum, then the score) is the argmax under teacher forcing — then greedy decoding
    writes exactly that verdict, so this is a lower bound on greedy agreement with the
    exact checker. Returns overall, on correct answers, on wrong answers."""
    import torch

    one = _encode(tok, verdict("0", "0", 1))[-1]
    with torch.no_grad():
        ids, lab = _batch(rows, tok.pad_token_id)
        pred = model(ids).logits.argmax(-1)
    ok = ((pred == lab) | (lab == -100)).all(1).tolist()
    pos = [o for o, (_, t) in zip(ok, rows) if t[-2] == one]
    neg = [o for o, (_, t) in zip(ok, rows) if t[-2] != one]
    return float(np.mean(ok)), float(np.mean(pos)), float(np.mean(neg))


# ---------------------------------------------------------------------------- driver
# Per role; bump when that role's data or format (for the GenRM also genrm.TEMPLATE)
# change: the stamp then differs, so cached and committed checkpoints of the old
# recipe are retrained, not reused. GenRM 2: warm start from the SFT actor, response-first
# template, verdict " <sum> <read answer> <marks> score: v", actor-like near misses.
RECIPE_VERSION = {"actor": 1, "genrm": 2}


def _stamp(spec: ModelSpec, cfg: PrepConfig, role: str) -> dict:
    """What a checkpoint was made from: its shape and only its own role's recipe fields
    (so tuning the GenRM's recipe leaves the actor's stamp, and checkpoint, valid)."""
    other = "genrm_" if role == "actor" else "actor_"
    mine = {k: v for k, v in asdict(cfg).items() if not k.startswith(other)}
    return {"role": role, "spec": {"name": spec.name, **_shape(spec)}, "cfg": mine,
            "version": RECIPE_VERSION[role]}


def _is_prepared(d: Path, stamp: dict) -> Optional[dict]:
    try:
        got = json.loads((d / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return got if got.get("stamp") == stamp and (d / "model.safetensors").exists() else None


# The demo actor's shape, read by GenRM preparation (the GenRM starts from its checkpoint).
ACTOR_MODEL = "model/demo-actor.yaml"


def demo_actor_spec() -> ModelSpec:
    from yatt.core.config import read_yaml
    from yatt.core.schema import from_dict

    return from_dict(ModelSpec, read_yaml(bundled(ACTOR_MODEL)))


def _shape(spec: ModelSpec) -> dict:
    return {k: v for k, v in asdict(spec).items()
            if k not in ("name", "source", "hf_path", "published_params")}


class DemoRole(str, Enum):
    ACTOR = "actor"
    GENRM = "genrm"


# Model names (configs/model/demo-*.yaml) whose checkpoints this module prepares on demand.
PREPARED_MODELS: dict[str, DemoRole] = {"demo-actor": DemoRole.ACTOR, "demo-genrm": DemoRole.GENRM}


def prepared_dir(spec: ModelSpec, role: DemoRole, out_root: Path, cfg: PrepConfig) -> Path:
    return Path(out_root) / f"{spec.name}-{role.value}-s{cfg.seed}"


def prepare_one(spec: ModelSpec, role: DemoRole, out_root: Path, cfg: PrepConfig = PrepConfig(),
                log: Callable[[str], None] = lambda s: None) -> tuple[Path, dict]:
    """Train (or reuse, when its stamp matches) one demo checkpoint; returns (dir, report)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from yatt.exec.hf_model import build_hf_model

    d = prepared_dir(spec, role, out_root, cfg)
    stamp = _stamp(spec, cfg, role.value)
    init = None
    if role is DemoRole.GENRM:    # warm start from the SFT actor (prepared first, if needed)
        actor = demo_actor_spec()
        if _shape(actor) != _shape(spec):
            raise InputError(f"got a shape unlike demo-actor's ({ACTOR_MODEL}); allowed: the "
                             "demo GenRM is warm-started from the SFT actor, so the same shape",
                             field="genrm")
        init, _ = prepare_one(actor, DemoRole.ACTOR, out_root, cfg, log)
        stamp["init"] = json.loads((init / STAMP).read_text())["stamp"]
    done = _is_prepared(d, stamp)
    if done:
        return d, done["report"]
    shipped = shipped_models() / d.name
    done = _is_prepared(shipped, stamp)
    if done:                      # the same recipe, trained once and committed: copy it
        import shutil
        shutil.copytree(shipped, d, dirs_exist_ok=True)
        return d, done["report"]
    import shutil
    shutil.rmtree(d, ignore_errors=True)    # always from the seeded random init, never resumed
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rng = np.random.default_rng([cfg.seed, 1 if role is DemoRole.ACTOR else 2])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        build_hf_model(spec, d, cfg.seed)
        tok = AutoTokenizer.from_pretrained(str(d))
        model = AutoModelForCausalLM.from_pretrained(str(init or d), dtype=torch.float32)
        rep = _TRAIN[role](model, tok, cfg, rng, log)
        model.save_pretrained(str(d), safe_serialization=True)
    (d / STAMP).write_text(json.dumps({"stamp": stamp, "report": rep}, indent=1))
    return d, rep


def _train_actor(model, tok, cfg: PrepConfig, rng, log) -> dict:
    held = actor_rows(tok, np.random.default_rng([cfg.seed, 99]), cfg.eval_rows)
    acc = {"v": 0.0}

    def stop(step: int) -> bool:
        acc["v"] = actor_expected_accuracy(model, tok, held)
        log(f"actor step {step}: expected accuracy {acc['v']:.3f}, "
            f"greedy {actor_greedy_accuracy(model, tok, held):.3f}")
        return acc["v"] >= cfg.actor_target
    n = _train(model, lambda r: actor_rows(tok, r, cfg.batch), tok.pad_token_id,
               cfg.actor_max_steps, cfg.actor_lr, rng, stop, cfg.eval_every)
    model.eval()
    return {"actor_steps": n,
            "actor_expected_accuracy": round(actor_expected_accuracy(model, tok, held), 4)}


def _train_genrm(model, tok, cfg: PrepConfig, rng, log) -> dict:
    held = genrm_rows(tok, np.random.default_rng([cfg.seed, 98]), cfg.eval_rows)

    def gstop(step: int) -> bool:
        ag = genrm_agreement(model, tok, held)[0]
        log(f"genrm step {step}: agreement {ag:.3f}")
        return ag >= cfg.genrm_target
    n = _train(model, lambda r: genrm_rows(tok, r, cfg.batch), tok.pad_token_id,
               cfg.genrm_steps, cfg.genrm_lr, rng, gstop, cfg.eval_every)
    model.eval()
    ag, ap, an = genrm_agreement(model, tok, held)
    return {"genrm_steps": n, "genrm_agreement": round(ag, 4), "genrm_agreement_on_correct": round(ap, 4),
            "genrm_agreement_on_wrong": round(an, 4)}


_TRAIN: dict[DemoRole, Callable[..., dict]] = {DemoRole.ACTOR: _train_actor,
                                               DemoRole.GENRM: _train_genrm}


def prepare(actor: ModelSpec, genrm: ModelSpec, out_root: Path, cfg: PrepConfig = PrepConfig(),
            log: Callable[[str], None] = lambda s: None) -> PrepReport:
    """Train (or reuse) the demo actor and GenRM under out_root."""
    t0 = time.perf_counter()
    a_dir, a_rep = prepare_one(actor, DemoRole.ACTOR, out_root, cfg, log)
    g_dir, g_rep = prepare_one(genrm, DemoRole.GENRM, out_root, cfg, log)
    return PrepReport(str(a_dir), str(g_dir), **a_rep, **g_rep,
                      seconds=round(time.perf_counter() - t0, 1))

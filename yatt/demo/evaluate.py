"""How well the prepared demo models do what the learning demo needs of them.

Why: preparing the checkpoints (demo_prep.py) and judging them are different jobs with
different readers: `yatt demo prepare` and `bench/learning.py` report the GenRM's agreement
with the exact checker, measured the way a run uses the GenRM (greedy generation after the
judging template, `ScoreParser` on the text), on held-out near misses and on the actor's
own sampled answers.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .prep import _encode, judge_text, problem, wrong_answer


def _load(d: str | Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoTokenizer.from_pretrained(str(d)),
            AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval())


def _generate(model, tok, prompts: list[list[int]], max_new: int, sample: bool) -> list[str]:
    """Batched HF generation (left-padded), decoded like the run decodes (no specials)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    att = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], att[i, width - len(p):] = torch.tensor(p), 1
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sample else dict(do_sample=False)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **kw)
    return [tok.decode(o[width:].tolist(), skip_special_tokens=True) for o in out]


def _judge(genrm, tok, pairs: list[tuple[str, str]], max_new: int) -> list[bool]:
    """GenRM verdicts (reward >= 0.5) for (question, decoded response) pairs, greedy."""
    from yatt.exec.genrm import default_parser

    parser = default_parser()
    texts = _generate(genrm, tok, [[tok.bos_token_id] + _encode(tok, judge_text(q, r))
                                   for q, r in pairs], max_new, sample=False)
    return [parser.parse(t).reward >= 0.5 for t in texts]


def _agreement(says: list[bool], truth: list[bool], n: int) -> dict:
    hit = {t: [s == t for s, t2 in zip(says, truth) if t2 == t] for t in (True, False)}
    return {"agreement": round(float(np.mean([s == t for s, t in zip(says, truth)])), 4),
            "on_correct": round(float(np.mean(hit[True])), 4) if hit[True] else None,
            "on_wrong": round(float(np.mean(hit[False])), 4) if hit[False] else None,
            "correct_share": round(float(np.mean(truth)), 4), "pairs": n}


# The run's GenRM budget: workload.genrm_output_len (configs/workload/demo-learn.yaml).
JUDGE_TOKENS = 24


def generated_agreement(genrm_dir: str | Path, n: int = 256, seed: int = 7) -> dict:
    """The GenRM as a run uses it: greedy generation (HF) after the judging template,
    `ScoreParser` on the text, verdict >= 0.5 vs the exact checker, on n fresh held-out
    pairs (half correct answers, half near misses)."""
    from yatt.exec.task import exact_match

    tok, model = _load(genrm_dir)
    rng = np.random.default_rng([seed, 97])
    pairs, truth = [], []
    for i in range(n):
        q, a = problem(rng)
        r = " " + (a if i % 2 == 0 else wrong_answer(rng, a))
        pairs.append((q, r))
        truth.append(exact_match(a, r) == 1.0)
    return _agreement(_judge(model, tok, pairs, JUDGE_TOKENS), truth, n)


def rollout_agreement(actor_dir: str | Path, genrm_dir: str | Path, n: int = 512,
                      seed: int = 7, max_tokens: int = 8) -> dict:
    """The GenRM on the actor's own rollouts: the actor samples an answer at temperature 1
    (as the run's engine does) to n fresh problems, the GenRM judges each greedily, and the
    verdict is compared with `task.exact_match`. This is the reward the RL actually sees."""
    import torch

    from yatt.exec.task import exact_match

    atok, actor = _load(actor_dir)
    gtok, genrm = _load(genrm_dir)
    rng = np.random.default_rng([seed, 96])
    probs = [problem(rng) for _ in range(n)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        resp = _generate(actor, atok, [[atok.bos_token_id] + _encode(atok, q) for q, _ in probs],
                         max_tokens, sample=True)
    truth = [exact_match(a, r) == 1.0 for (_, a), r in zip(probs, resp)]
    return _agreement(_judge(genrm, gtok, [(q, r) for (q, _), r in zip(probs, resp)], JUDGE_TOKENS),
                      truth, n)

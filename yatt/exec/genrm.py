"""Generative reward model: judging template, robust score parser, rule rewards, engine.

Why: a GenRM is a causal LM that *writes* its verdict, so a reward needs three pieces:
a template that turns (prompt, response) into a judging prompt, a parser that survives
whatever the model writes (`Score: 7`, `score=0.5`, `correctness: 1, style: 3`, garbage),
and an engine. Unparseable output gets a defined fallback score and is counted, never
silently dropped. Rule-based rewards (exact match) share the `Judgment` result type, so
the rest of the executor does not care where a reward came from
(`Experiment.algo.reward`).
"""
from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from yatt.core.roles import RewardSource

from .rollout import EngineConfig, EngineServer, GenRequest, GenResult

# Response first, then the question, so the judging prompt *ends with the question*: the
# GenRM's verdict (" <its sum> score: 0|1" for the demo) then starts at a fixed distance
# from the question's digits, whatever the response's length, as in the actor's own task.
# With the question first, that distance varies with the response, and a tiny GenRM learns
# to copy the response instead of adding (docs/rl-algorithm.md, the learning demo).
TEMPLATE = "{response}\n{prompt}"
_PAIR = re.compile(r"([A-Za-z_][A-Za-z_ ]{0,31}?)\s*[:=]\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
_LEAD = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class ParsedScore:
    """Scores found in a verdict; `ok` False means the fallback was used."""

    reward: float
    dims: tuple[tuple[str, float], ...] = ()
    ok: bool = True


@dataclass(frozen=True)
class ScoreParser:
    """Turns verdict text into a reward.

    Rules, in order: `score`/`reward`/`rating` key → that value; other `name: number`
    pairs → their mean (multi-dimensional verdict); a number at the very start (the
    template ends in 'Score:') → that value; anything else → `fallback`, ok=False.
    Values are clipped to [lo, hi]; NaN/inf count as unparseable.
    """

    lo: float = 0.0
    hi: float = 10.0
    fallback: float = 0.0
    primary: tuple[str, ...] = ("score", "reward", "rating")

    def parse(self, text: str) -> ParsedScore:
        dims = []
        for m in _PAIR.finditer(text or ""):
            name = m.group(1).strip().lower().replace(" ", "_")
            val = float(m.group(2))
            if math.isfinite(val):
                dims.append((name, min(self.hi, max(self.lo, val))))
        for key in self.primary:
            for name, val in dims:
                if name == key or name.endswith("_" + key):
                    return ParsedScore(val, tuple(dims))
        if dims:
            return ParsedScore(sum(v for _, v in dims) / len(dims), tuple(dims))
        m = _LEAD.match(text or "")
        if m and math.isfinite(float(m.group(1))):
            val = min(self.hi, max(self.lo, float(m.group(1))))
            return ParsedScore(val, (("score", val),))
        return ParsedScore(self.fallback, (), ok=False)


@dataclass(frozen=True)
class Judgment:
    key: int
    reward: float
    parsed: bool = True
    input_tokens: int = 0
    output_tokens: int = 0
    end_s: float = 0.0
    text: str = ""


# Rule rewards: (answer, response text) -> reward. One entry per task checker.
RuleFn = Callable[[str, str], float]


def rule_judgment(key: int, answer: str, response: str, fn: RuleFn, end_s: float) -> Judgment:
    return Judgment(key, float(fn(answer, response)), True, 0, 0, end_s)


@dataclass(frozen=True)
class JudgeConfig:
    actor_tokenizer: str        # path: decodes the policy's tokens
    genrm_tokenizer: str        # path: encodes the judging prompt
    max_tokens: int = 8
    template: str = TEMPLATE
    parser: ScoreParser = ScoreParser()
    max_prompt_tokens: int = 448


class GenRMServer(EngineServer):
    """An engine actor that judges rollout results (batch, or streamed from a queue)."""

    def __init__(self, cfg: EngineConfig, judge: JudgeConfig):
        super().__init__(cfg)
        from transformers import AutoTokenizer

        self.judge_cfg = judge
        self.src_tok = AutoTokenizer.from_pretrained(judge.actor_tokenizer)
        self.dst_tok = (self.src_tok if judge.genrm_tokenizer == judge.actor_tokenizer
                        else AutoTokenizer.from_pretrained(judge.genrm_tokenizer))

    def _request(self, r: GenResult) -> GenRequest:
        prompt = self.src_tok.decode(list(r.prompt_ids), skip_special_tokens=True)
        resp = self.src_tok.decode(list(r.token_ids), skip_special_tokens=True)
        text = self.judge_cfg.template.format(prompt=prompt, response=resp)
        ids = self.dst_tok.encode(text, add_special_tokens=False)[-self.judge_cfg.max_prompt_tokens:]
        bos = self.dst_tok.bos_token_id
        ids = ([bos] if bos is not None else []) + ids
        return GenRequest(r.key, tuple(ids), self.judge_cfg.max_tokens, temperature=0.0,
                          logprobs=False)

    async def judge(self, results: list[GenResult]) -> list[Judgment]:
        reqs = [self._request(r) for r in results]
        outs = await self.generate(reqs)
        by_key = {o.key: o for o in outs}
        judged = []
        for q in reqs:
            o = by_key[q.key]
            text = self.dst_tok.decode(list(o.token_ids), skip_special_tokens=True)
            p = self.judge_cfg.parser.parse(text)
            judged.append(Judgment(q.key, p.reward, p.ok, len(q.prompt_ids), len(o.token_ids),
                                   o.end_s, text))
        return judged

    async def judge_stream(self, queue: Any, expected: int) -> list[Judgment]:
        """Judge `expected` results arriving as batches on `queue`, each batch submitted to
        the engine as soon as it arrives (concurrently with rollout)."""
        tasks = []
        got = 0
        while got < expected:
            batch = await queue.get_async()
            got += len(batch)
            tasks.append(asyncio.ensure_future(self.judge(batch)))
        out: list[Judgment] = []
        for part in await asyncio.gather(*tasks):
            out.extend(part)
        return out


def reward_needs_engine(source: RewardSource) -> bool:
    """Whether a reward source needs a GenRM engine (vs. a rule computed in place)."""
    return {RewardSource.GENRM: True, RewardSource.RULE: False}[source]


def default_parser(max_score: Optional[float] = None) -> ScoreParser:
    return ScoreParser(hi=max_score if max_score is not None else 10.0)

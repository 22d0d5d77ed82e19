"""Generative reward model: judging template, verdict parsers, rule rewards, engine.

Why: a GenRM is a causal LM that *writes* its verdict, so a reward needs three pieces:
a template that turns (prompt, response, answer) into a judging prompt (the
experiment's `genrm_judge.template`, wrapped in the GenRM's chat template when it has
one), a parser that survives whatever the model writes (`Score: 7`, `yes`,
`\\boxed{3}`, a user regex, garbage), and an engine. Unparseable output gets a defined
fallback score and is counted, never silently dropped. Rule-based rewards share the
`Judgment` result type, so the rest of the executor does not care where a reward came
from (`Experiment.algo.reward`).
"""
from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from yatt.core.jobspec import DEFAULT_JUDGE_TEMPLATE, ChatTemplate, JudgeSpec, VerdictParser
from yatt.core.roles import RewardSource

from .rollout import EngineConfig, EngineServer, GenRequest, GenResult

TEMPLATE = DEFAULT_JUDGE_TEMPLATE     # the learning demo's GenRM was trained on this layout
_PAIR = re.compile(r"([A-Za-z_][A-Za-z_ ]{0,31}?)\s*[:=]\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
_LEAD = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


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
class YesNoParser:
    """The first standalone yes (hi) or no (lo), case-insensitive; neither: the fallback."""

    lo: float = 0.0
    hi: float = 1.0
    fallback: float = 0.0

    def parse(self, text: str) -> ParsedScore:
        m = re.search(r"\b(yes|no)\b", text or "", re.IGNORECASE)
        if m is None:
            return ParsedScore(self.fallback, (), ok=False)
        val = self.hi if m.group(1).lower() == "yes" else self.lo
        return ParsedScore(val, (("score", val),))


@dataclass(frozen=True)
class BoxedParser:
    """The number inside the last \\boxed{...}, clipped to [lo, hi]."""

    lo: float = 0.0
    hi: float = 10.0
    fallback: float = 0.0

    def parse(self, text: str) -> ParsedScore:
        found = re.findall(r"\\boxed\{([^{}]*)\}", text or "")
        m = _NUMBER.search(found[-1]) if found else None
        if m is None or not math.isfinite(float(m.group(0))):
            return ParsedScore(self.fallback, (), ok=False)
        val = min(self.hi, max(self.lo, float(m.group(0))))
        return ParsedScore(val, (("score", val),))


@dataclass(frozen=True)
class RegexParser:
    """The first match of `pattern`; its named group `score` is the number (clipped)."""

    pattern: str
    lo: float = 0.0
    hi: float = 10.0
    fallback: float = 0.0

    def parse(self, text: str) -> ParsedScore:
        m = re.search(self.pattern, text or "")
        try:
            val = float(m.group("score")) if m is not None else math.nan
        except (TypeError, ValueError):
            val = math.nan
        if not math.isfinite(val):
            return ParsedScore(self.fallback, (), ok=False)
        val = min(self.hi, max(self.lo, val))
        return ParsedScore(val, (("score", val),))


Parser = Union[ScoreParser, YesNoParser, BoxedParser, RegexParser]


def make_parser(spec: JudgeSpec) -> Parser:
    """The verdict parser `genrm_judge` asks for."""
    lo, hi, fb = spec.score_min, spec.score_max, spec.fallback
    makers: dict[VerdictParser, Callable[[], Parser]] = {
        VerdictParser.SCORE: lambda: ScoreParser(lo, hi, fb),
        VerdictParser.YES_NO: lambda: YesNoParser(fallback=fb),
        VerdictParser.BOXED: lambda: BoxedParser(lo, hi, fb),
        VerdictParser.REGEX: lambda: RegexParser(spec.regex, lo, hi, fb),
    }
    return makers[spec.parser]()


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
    parser: Parser = ScoreParser()
    max_prompt_tokens: int = 448
    temperature: float = 0.0
    chat: bool = True           # wrap in the GenRM tokenizer's chat template, if it has one

    @classmethod
    def from_spec(cls, spec: JudgeSpec, actor_tokenizer: str, genrm_tokenizer: str,
                  max_tokens: int, max_prompt_tokens: int) -> "JudgeConfig":
        return cls(actor_tokenizer, genrm_tokenizer, max_tokens, spec.template,
                   make_parser(spec), max_prompt_tokens, spec.temperature,
                   spec.chat_template is ChatTemplate.AUTO)


@dataclass(frozen=True)
class JudgeInput:
    """What the judging template needs beyond the rollout itself (sent by the controller)."""

    prompt: str
    answer: str = ""


def judge_ids(tok: Any, template: str, chat_template: Optional[str], prompt: str, resp: str,
              answer: str) -> list[int]:
    """Token ids of one judging prompt: the template filled in, wrapped as a user message in
    `chat_template` (if any), with the tokenizer's BOS rule (data.PromptEncoder's)."""
    text = template.format(prompt=prompt, response=resp, answer=answer)
    if chat_template is not None:
        text = tok.apply_chat_template([{"role": "user", "content": text}],
                                       chat_template=chat_template,
                                       add_generation_prompt=True, tokenize=False)
    ids = list(tok.encode(text, add_special_tokens=False))
    bos = tok.bos_token_id
    if bos is not None and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    return ids


class GenRMServer(EngineServer):
    """An engine actor that judges rollout results (batch, or streamed from a queue)."""

    def __init__(self, cfg: EngineConfig, judge: JudgeConfig):
        super().__init__(cfg)
        from transformers import AutoTokenizer

        self.judge_cfg = judge
        self.src_tok = AutoTokenizer.from_pretrained(judge.actor_tokenizer)
        self.dst_tok = (self.src_tok if judge.genrm_tokenizer == judge.actor_tokenizer
                        else AutoTokenizer.from_pretrained(judge.genrm_tokenizer))
        tmpl = getattr(self.dst_tok, "chat_template", None) if judge.chat else None
        self.chat_template: Optional[str] = tmpl or None

    def _judge_ids(self, prompt: str, resp: str, answer: str) -> list[int]:
        return judge_ids(self.dst_tok, self.judge_cfg.template, self.chat_template,
                         prompt, resp, answer)

    def _request(self, r: GenResult, ctx: Optional[JudgeInput] = None) -> GenRequest:
        prompt = (ctx.prompt if ctx is not None
                  else self.src_tok.decode(list(r.prompt_ids), skip_special_tokens=True))
        answer = ctx.answer if ctx is not None else ""
        resp = self.src_tok.decode(list(r.token_ids), skip_special_tokens=True)
        cap = self.judge_cfg.max_prompt_tokens
        ids = self._judge_ids(prompt, resp, answer)
        if len(ids) > cap and resp:
            # too long: shorten the response, keeping the template and its chat wrapping
            # whole (the left cut below is the last resort)
            rt = self.dst_tok.encode(resp, add_special_tokens=False)
            keep = max(0, len(rt) - (len(ids) - cap))
            ids = self._judge_ids(prompt, self.dst_tok.decode(rt[:keep]), answer)
        ids = ids[-cap:]
        t = self.judge_cfg.temperature
        return GenRequest(r.key, tuple(ids), self.judge_cfg.max_tokens, temperature=t,
                          seed=r.key if t > 0 else None, logprobs=False)

    async def judge(self, results: list[GenResult],
                    context: Optional[Mapping[int, JudgeInput]] = None) -> list[Judgment]:
        ctx = context or {}
        reqs = [self._request(r, ctx.get(r.key)) for r in results]
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

    async def judge_stream(self, queue: Any, expected: int,
                           context: Optional[Mapping[int, JudgeInput]] = None) -> list[Judgment]:
        """Judge `expected` results arriving as batches on `queue` (a `StreamQueue`),
        concurrently with rollout: every batch that arrived since the last get is submitted
        to the engine as one call."""
        tasks = []
        got = 0
        while got < expected:
            batch = [r for b in await queue.get_all_async() for r in b]
            got += len(batch)
            tasks.append(asyncio.ensure_future(self.judge(batch, context)))
        out: list[Judgment] = []
        for part in await asyncio.gather(*tasks):
            out.extend(part)
        return out


def reward_needs_engine(source: RewardSource) -> bool:
    """Whether a reward source needs a GenRM engine (vs. a rule computed in place)."""
    return source.needs_genrm


def default_parser(max_score: Optional[float] = None) -> ScoreParser:
    return ScoreParser(hi=max_score if max_score is not None else 10.0)

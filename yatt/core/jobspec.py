"""Specs of the user's own job: prompts (`data:`), the rule reward (`reward:`), the GenRM
judge (`genrm_judge:`), tracking (`log:`) and the numeric type.

Why: `yatt run` trains what the experiment file names, not a built-in task. These frozen
specs say what the user asked for and validate what can be checked without reading a
dataset or importing their code (allowed values, exclusive fields, the judge's template
fields and verdict regex). The executor (yatt/exec/data.py, reward.py, genrm.py) does the
rest before any worker starts. Paths in these specs are absolute once loaded
(core/config.py resolves them against the experiment file), so a plan.yaml is
self-contained.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from .errors import InputError
from .schema import show, spec_field


class BuiltinData(str, Enum):
    ARITH = "arith"          # 2-digit addition prompts, generated from (seed, step, round)


class OnLong(str, Enum):
    """What happens to a prompt longer than `data.max_prompt_len` tokens."""

    DROP = "drop"            # left out of the dataset, and counted
    TRUNCATE = "truncate"    # its first max_prompt_len tokens are kept, and counted
    FAIL = "fail"            # the run is refused, naming the row


class OnError(str, Enum):
    """What a failing reward function call (raise, NaN, non-number, timeout) does."""

    FAIL = "fail"            # stop the run: one line naming the function, sample and reason
    ZERO = "zero"            # score 0.0, counted in metrics.csv `reward_errors`


class BuiltinReward(str, Enum):
    EXACT_MATCH = "exact_match"      # response == answer, after trimming and case folding
    FIRST_INTEGER = "first_integer"  # the response's first integer == answer (the arith task)
    MATH = "math"                    # math-verify answer equivalence (the `math` extra)


class VerdictParser(str, Enum):
    """How a GenRM's verdict text becomes a score."""

    SCORE = "score"          # `score: X` (also reward/rating, name: X pairs, a leading number)
    YES_NO = "yes_no"        # the first standalone yes (1.0) or no (0.0)
    BOXED = "boxed"          # the number in the last \boxed{...}
    REGEX = "regex"          # genrm_judge.regex, whose named group `score` holds the number


class ChatTemplate(str, Enum):
    AUTO = "auto"            # the tokenizer's own chat template, when it has one
    NONE = "none"            # plain text


class Dtype(str, Enum):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"    # GPU: bf16 weights, fp32 main grads; CPU: runs float32 (docs)


# Response first, then the question, so the judging prompt *ends with the question*: the
# demo GenRM's verdict (" <its sum> score: 0|1") then starts at a fixed distance from the
# question's digits, whatever the response's length (docs/rl-algorithm.md, the learning demo).
DEFAULT_JUDGE_TEMPLATE = "{response}\n{prompt}"
JUDGE_FIELDS = ("prompt", "response", "answer")


@dataclass(frozen=True)
class DataSpec:
    """Where prompts come from. `train`/`eval`: a .jsonl, .json or .parquet file, or a
    directory written by `datasets`' `save_to_disk`. Or `builtin: arith`."""

    builtin: Optional[BuiltinData] = spec_field(None, help="a built-in prompt set instead of files: arith")
    train: str = spec_field("", help="prompt file or save_to_disk directory")
    eval: str = spec_field("", help="held-out prompts, same format (with eval_every)")
    prompt_key: str = spec_field("prompt", help="column holding a string or a chat message list")
    answer_key: str = spec_field("", help="column holding the reference answer ('' = none)")
    chat_template: str = spec_field("auto", help="auto | none | path to a Jinja template")
    system_prompt: str = spec_field("", help="system message (plain text: a first line)")
    max_prompt_len: int = spec_field(0, ge=0, help="prompt token cap; 0 = the workload's "
                                                   "prompt_len cap")
    on_long: OnLong = spec_field(OnLong.DROP, help="a prompt over max_prompt_len: drop it (counted), "
                                                   "truncate it, or fail")
    shuffle_seed: Optional[int] = spec_field(0, help="per-epoch shuffle seed; null = file order")
    epochs: int = spec_field(0, ge=0, help="passes over train the run may take; 0 = no limit")
    eval_every: int = spec_field(0, ge=0, help="evaluate at every N-th step (0 = never)")
    eval_samples: int = spec_field(1, ge=1, help="1 = greedy; k = k samples at algo.temperature")

    def __post_init__(self) -> None:
        if self.builtin is not None and (self.train or self.eval):
            raise InputError("give either builtin or train (and eval), not both", field="builtin")
        if self.builtin is None and not self.train:
            raise InputError("missing train; allowed: a .jsonl/.json/.parquet file or a "
                             "save_to_disk directory, or builtin: arith", field="train")
        if self.eval_every and not self.eval:
            raise InputError("eval_every needs an eval set; allowed: set data.eval, or "
                             "eval_every: 0", field="eval_every")
        if self.shuffle_seed is not None and self.shuffle_seed < 0:
            raise InputError(f"got {self.shuffle_seed}; allowed: an integer >= 0 or null (file "
                             "order)", field="shuffle_seed")
        if not self.prompt_key:
            raise InputError("got ''; allowed: a column name", field="prompt_key")
        if self.answer_key and self.answer_key == self.prompt_key:
            raise InputError(f"got {self.answer_key!r}, the prompt_key; allowed: another "
                             "column", field="answer_key")

    @property
    def template_mode(self) -> Optional[ChatTemplate]:
        """AUTO or NONE, or None when `chat_template` is a path."""
        try:
            return ChatTemplate(self.chat_template)
        except ValueError:
            return None


ARITH_DATA = DataSpec(builtin=BuiltinData.ARITH)


@dataclass(frozen=True)
class RewardSpec:
    """The rule reward (`algo.reward: rule`, or the rule half of `weighted`), which also
    scores every rollout for the `accuracy` metric.

    `function`: "pkg.module:fn" or "path/to/file.py:fn", called as
    `fn(prompt, response, **row)` (row: the sample's other columns) and returning a float,
    or a dict with a float `score` and other floats that are logged. Or `builtin`. Neither:
    first_integer for builtin arith data, exact_match when data has an answer_key."""

    function: str = spec_field("", help="'pkg.module:fn' or 'path/to/file.py:fn', called as "
                                         "fn(prompt, response, **row)")
    builtin: Optional[BuiltinReward] = spec_field(None, help="a built-in rule instead of a function")
    rule_weight: float = spec_field(0.5, ge=0, help="weighted: the rule score's weight")
    genrm_weight: float = spec_field(0.5, ge=0, help="weighted: the GenRM score's weight")
    timeout_s: float = spec_field(10.0, gt=0, help="per call")
    on_error: OnError = spec_field(OnError.FAIL, help="a call that raises, returns NaN or times out: "
                                                      "fail the run, or score 0 (counted)")
    correct_at: float = spec_field(0.5, help="a rule score >= this counts as correct "
                                             "(accuracy, eval_accuracy)")

    def __post_init__(self) -> None:
        if self.function and self.builtin is not None:
            raise InputError("give either function or builtin, not both", field="function")
        if self.function:
            mod, sep, fn = self.function.rpartition(":")
            if not sep or not mod or not fn or not all(p.isidentifier() for p in fn.split(".")):
                raise InputError(f"got {show(self.function)}; allowed: 'pkg.module:fn' or "
                                 "'path/to/file.py:fn'", field="function")


@dataclass(frozen=True)
class JudgeSpec:
    """How the GenRM is asked and how its verdict is read.

    `template`: Python format string with {prompt}, {response} and {answer} (`template_file`
    in YAML reads it from a file); it is wrapped in the GenRM's chat template when it has
    one and `chat_template` is auto. Unparseable verdicts score `fallback` and are counted
    (metrics.csv `genrm_parse_fail`)."""

    template: str = spec_field(DEFAULT_JUDGE_TEMPLATE, help="format string with {prompt}, {response}, "
                                                          "{answer} (or template_file: a path)")
    chat_template: ChatTemplate = spec_field(ChatTemplate.AUTO, help="auto: wrap in the GenRM's chat "
                                                                     "template when it has one; none: raw")
    parser: VerdictParser = spec_field(VerdictParser.SCORE, help="how the verdict is read: score: X, "
                                                                 "yes/no, \\boxed{}, or regex")
    regex: str = spec_field("", help="parser regex: a pattern with a named group `score`")
    max_tokens: int = spec_field(0, ge=0, help="verdict token budget; 0 = from the workload's "
                                               "genrm_output_len")
    temperature: float = spec_field(0.0, ge=0, help="verdict sampling temperature (0: greedy)")
    score_min: float = spec_field(0.0, help="scores are clipped to [score_min, score_max]")
    score_max: float = spec_field(10.0, help="upper clip of a parsed score")
    fallback: float = spec_field(0.0, help="score of an unparseable verdict")

    def __post_init__(self) -> None:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None]
        except ValueError as e:
            raise InputError(f"not a format string ({e}); write literal braces as {{{{ }}}}",
                             field="template") from None
        for f in fields:
            if f not in JUDGE_FIELDS:
                raise InputError(f"unknown field {{{f}}}; allowed: "
                                 + ", ".join("{" + x + "}" for x in JUDGE_FIELDS),
                                 field="template")
        if "response" not in fields:
            raise InputError("has no {response} field: the judge would never see the answer "
                             "it scores", field="template")
        if self.parser is VerdictParser.REGEX:
            if not self.regex:
                raise InputError("parser regex needs a regex with a named group `score`",
                                 field="regex")
            try:
                pat = re.compile(self.regex)
            except re.error as e:
                raise InputError(f"invalid regex ({e})", field="regex") from None
            if "score" not in pat.groupindex:
                raise InputError(f"got {show(self.regex)}; allowed: a pattern with a named "
                                 "group (?P<score>...)", field="regex")
        elif self.regex:
            raise InputError(f"regex is read only with parser: regex (got parser "
                             f"{self.parser.value})", field="regex")
        if self.score_min > self.score_max:
            raise InputError(f"score_min {self.score_min:g} > score_max {self.score_max:g}",
                             field="score_min")


@dataclass(frozen=True)
class LogSpec:
    """Where step metrics go besides metrics.csv (wandb and MLflow only when installed)."""

    tensorboard: str = spec_field("", help="directory for TensorBoard event files")
    wandb: str = spec_field("", help="Weights & Biases project, logged offline into the run dir")
    mlflow: str = spec_field("", help="MLflow tracking directory (a local file store)")

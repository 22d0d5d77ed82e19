"""Hostile inputs that are built at test time, one registry, one runner, and the report.

Why: the corpus under tests/data/bad holds small files; the rest of a hostile user's
toolbox does not fit there: gzip bombs, a 200 MB config, links planted in an output
directory, unwritable outputs, an output that is an input, tampered run directories,
terminal control bytes and rich markup in names. Each `Case` builds its inputs in a fresh
directory and runs one `yatt` command in a subprocess capped at 1 GB of address space;
`check` then holds it to the rules every hostile input shares:

- at most `CPU_S` seconds of CPU and `RSS_MB` of memory (wall time on a shared CI box
  is no measure; a hang is caught by the `WALL_S` timeout), no traceback;
- refused: exit 2, exactly one stderr line naming the file and the field, and nothing
  written: every file that existed is unchanged and the output directory stays empty;
- written safely (links planted in --out) or printed as text (markup, control bytes):
  exit 0, the link's target untouched, the text shown literally.

`python tests/cli/_hostile_cases.py > docs/hostile-inputs.md` writes the report of every
case, corpus and built; tests/cli/test_hostile_built.py runs the built ones and keeps the
report current.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import resource
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

import yaml

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "data" / "bad"
CONFIGS = ROOT / "configs"
DEMO = CONFIGS / "demo-cpu.yaml"

CPU_S = 20.0          # CPU seconds a hostile input may cost: `yatt run --resume` imports
                      # torch, ray and megatron (8-10 s of CPU on a 2-core box) before it
                      # refuses anything; a runaway input (a bomb, a loop) costs minutes
RSS_MB = 1024         # peak resident memory it may cost
AS_BYTES = 1 << 30    # the subprocess's address-space cap (RLIMIT_AS)
WALL_S = 180          # a hang, on a busy machine

REFUSED = "refused"
WRITTEN_SAFELY = "written safely"
PRINTED_AS_TEXT = "printed as text"
MARKER = "PWNED"      # what a pickled payload would create: it must never exist


@dataclasses.dataclass
class Ctx:
    """Where a case builds its inputs: `tmp` (everything), `out` (its --out, absent),
    `victim` (a file outside --out that nothing may touch), extra environment, and for
    checkpoint cases a real trainer checkpoint to copy."""

    tmp: Path
    env: dict
    checkpoint: Optional[Path] = None
    cleanup: list = dataclasses.field(default_factory=list)   # commands run after the case

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    @property
    def victim(self) -> Path:
        return self.tmp / "victim.txt"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    klass: str
    what: str
    build: Callable[[Ctx], list[str]]        # the argv after `yatt`
    file: str = ""                           # fragments the refusal's one line must hold
    field: str = ""
    message: str = ""
    outcome: str = REFUSED
    needs: str = ""                          # "" | "exec" (torch, ray) | "checkpoint"
    after: Optional[Callable[[Ctx, "Result"], None]] = None   # extra checks


@dataclasses.dataclass
class Result:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    cpu_s: float
    rss_mb: float
    timed_out: bool


# ---- inputs -------------------------------------------------------------------------------
def _inline(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def demo_config(ctx: Ctx, file: str = "exp.yaml", **changes) -> Path:
    """The bundled CPU demo with its parts inline, `changes` applied by dotted path
    (`workload__prompts_per_step=...`), written to ctx.tmp/file."""
    d = _inline(DEMO)
    for key in ("cluster", "actor", "genrm", "workload"):
        d[key] = _inline(CONFIGS / d[key])
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        cur = d
        for p in parents:
            cur = cur.setdefault(p, {})
        cur[last] = value
    p = ctx.tmp / file
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def trace_lines() -> list[str]:
    """A valid one-step trace (16 devices, 4 samples): the corpus's base trace."""
    lines = (BAD / "trace" / "unknown-meta-key.jsonl").read_text().splitlines()
    meta = json.loads(lines[0])
    meta.pop("bogus")
    return [json.dumps(meta, separators=(",", ":"))] + lines[1:]


def write_trace(ctx: Ctx, name: str = "trace.jsonl", lines: Optional[list[str]] = None) -> Path:
    p = ctx.tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines or trace_lines()) + "\n")
    return p


def gzip_bomb(path: Path, chunk: bytes, copies: int) -> Path:
    """A .gz of `copies` gzip members of `chunk` each: len(chunk) x copies bytes
    decompressed from a file ~1000x smaller."""
    member = gzip.compress(chunk, 9)
    with open(path, "wb") as f:
        for _ in range(copies):
            f.write(member)
    return path


def sparse_file(path: Path, size: int) -> Path:
    """A file of `size` zero bytes that takes no disk space."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def plant_links(ctx: Ctx, names: tuple[str, ...]) -> None:
    """--out exists with each of `names` a link to the victim, and each `name.tmp` (the
    fixed temporary name a writer could be tricked by) a link to a file that must never exist."""
    ctx.out.mkdir()
    for n in names:
        os.symlink(ctx.victim, ctx.out / n)
        os.symlink(ctx.tmp / "created-through-a-link", ctx.out / f"{n}.tmp")


def run_dir(ctx: Ctx, run_json: Optional[str] = None, manifest: Optional[dict] = None) -> Path:
    """A run directory: plan.yaml (the demo, colocated), run.json, and one checkpoint whose
    manifest is `manifest` (default: none written)."""
    from yatt.core.config import dump_yaml, load_experiment
    from yatt.core.layout import make_plan
    from yatt.core.roles import Mode

    d = ctx.tmp / "run"
    d.mkdir()
    dump_yaml(make_plan(load_experiment(DEMO), Mode.COLOCATE), d / "plan.yaml")
    (d / "run.json").write_text(run_json if run_json is not None else
                                json.dumps({"steps": 3, "seed": 0, "controllers": 1}))
    if manifest is not None:
        c = d / "checkpoints" / "step-000000"
        (c / "trainer").mkdir(parents=True)
        (c / "trainer" / "common.pt").write_bytes(b"x")
        (c / "manifest.json").write_text(json.dumps({"format": "yatt.checkpoint/1", "files": manifest}))
    return d


# ---- the cases ----------------------------------------------------------------------------
def _demo_plan(ctx: Ctx, *extra: str, **changes) -> list[str]:
    return ["plan", str(demo_config(ctx, **changes)), "--out", str(ctx.out), "--no-progress", *extra]


def _out_regular(names: tuple[str, ...]) -> Callable[[Ctx, Result], None]:
    def after(ctx: Ctx, r: Result) -> None:
        for n in names:
            st = os.lstat(ctx.out / n)
            assert stat.S_ISREG(st.st_mode), f"{n} is not a regular file"
        assert not (ctx.tmp / "created-through-a-link").exists()
    return after


def _said(*fragments: str, absent: tuple[str, ...] = ()) -> Callable[[Ctx, Result], None]:
    def after(ctx: Ctx, r: Result) -> None:
        text = (r.stdout + r.stderr).replace("\n", "")   # rich wraps long lines
        for f in fragments:
            assert f in text, f"{f!r} not in the output"
        for f in absent:
            assert f not in text, f"{f!r} in the output"
    return after


def _big_name(ctx: Ctx, n: int) -> list[str]:
    return _demo_plan(ctx, name="x" * n)


def _replay(ctx: Ctx, trace: Path, gpus: str = "16") -> list[str]:
    return ["replay", str(trace), "--out", str(ctx.out), "--no-progress", "--gpus", gpus]


def _meta_100k(ctx: Ctx) -> list[str]:
    """A one-step trace recorded on 100k GPUs (the ceiling): replaying it is over budget."""
    import dataclasses as dc

    from yatt.core.layout import make_plan
    from yatt.core.plan import Plan
    from yatt.core.roles import Mode
    from yatt.core.schema import from_dict, to_dict

    lines = trace_lines()
    meta = json.loads(lines[0])
    plan = from_dict(Plan, meta["plan"])
    exp = dc.replace(plan.experiment, cluster=dc.replace(plan.cluster, nodes=12_500))
    meta["plan"] = to_dict(make_plan(exp, Mode.COLOCATE))
    return _replay(ctx, write_trace(ctx, lines=[json.dumps(meta)] + lines[1:]), "100000")


def _calibrate_self(ctx: Ctx) -> list[str]:
    t = write_trace(ctx)
    return ["calibrate", str(t), "-o", str(t), "--no-progress"]


def _calibrate_profile(ctx: Ctx, body: str, *extra: str) -> list[str]:
    """`yatt calibrate T --profile P` with P holding `body`."""
    p = ctx.tmp / "profile.yaml"
    p.write_text("kind: yatt.profile/1\n" + body)
    return ["calibrate", str(write_trace(ctx)), "--profile", str(p), *extra,
            "-o", str(ctx.tmp / "fitted.yaml"), "--no-progress"]


def _out_holds_input(ctx: Ctx) -> list[str]:
    ctx.out.mkdir()
    cfg = demo_config(ctx, file="out/plan.yaml")
    return ["plan", str(cfg), "--out", str(ctx.out), "--no-progress"]


def _resume(ctx: Ctx, **kw) -> list[str]:
    return ["run", "--resume", str(run_dir(ctx, **kw)), "--no-progress"]


def _plain_file_run_dir(ctx: Ctx) -> list[str]:
    f = ctx.tmp / "run"
    f.write_text("not a directory\n")
    return ["run", "--resume", str(f), "--no-progress"]


def _faults(ctx: Ctx) -> list[str]:
    ctx.env["YATT_FAULTS"] = "trainer.explode@x"
    return ["run", str(DEMO), "--out", str(ctx.out), "--no-progress"]


def _host_check_env(ctx: Ctx) -> list[str]:
    ctx.env["YATT_HOST_CHECK"] = "maybe"
    return ["plan", str(demo_config(ctx)), "--profile", str(CONFIGS / "profiles" / "cpu-local.yaml"),
            "--out", str(ctx.out), "--no-progress"]


def _sparse_profile(ctx: Ctx) -> list[str]:
    p = sparse_file(ctx.tmp / "profile.yaml", 200 << 20)
    return ["plan", str(demo_config(ctx)), "--profile", str(p), "--out", str(ctx.out), "--no-progress"]


def _budget_env(ctx: Ctx) -> list[str]:
    ctx.env["YATT_MAX_SIM_WORK"] = "1000"
    small = ROOT / "traces" / "small-1.5b-7b-h100x16.jsonl.gz"   # four steps: enough to fit
    return ["calibrate", str(small), "-o", str(ctx.tmp / "p.yaml"), "--no-progress"]


def _unwritable(verb: str, target: str) -> Callable[[Ctx], list[str]]:
    def build(ctx: Ctx) -> list[str]:
        if verb == "plan":
            return ["plan", str(demo_config(ctx)), "--out", target, "--no-progress"]
        if verb == "replay":
            return _replay(ctx, write_trace(ctx))[:2] + ["--out", target, "--no-progress"]
        if verb == "calibrate":
            return ["calibrate", str(write_trace(ctx)), "-o", target, "--no-progress"]
        if verb == "run":
            return ["run", str(demo_config(ctx)), "--out", target, "--no-progress"]
        return ["profile", str(demo_config(ctx)), "-o", target, "--no-progress"]
    return build


def _ckpt_dir(kind: str) -> Callable[[Ctx], list[str]]:
    """`yatt run` into an --out whose checkpoints/ is a file, a dangling link (missing and
    not creatable), or a read-only mount (a bind mount: chmod does not stop root)."""
    def build(ctx: Ctx) -> list[str]:
        d = ctx.out / "checkpoints"
        ctx.out.mkdir()
        if kind == "file":
            d.write_text("not a directory\n")
        elif kind == "link":
            d.symlink_to(ctx.tmp / "gone" / "checkpoints")
        else:
            d.mkdir()
            if os.geteuid() != 0:
                d.chmod(0o555)
            elif subprocess.run(["mount", "--bind", "-o", "ro", str(d), str(d)],
                                capture_output=True).returncode != 0:
                import pytest
                pytest.skip("needs a read-only mount (root may write through chmod 555)")
            else:
                ctx.cleanup.append(["umount", str(d)])
        return ["run", str(demo_config(ctx)), "--out", str(ctx.out), "--no-progress"]
    return build


def _a_file(ctx: Ctx) -> str:
    p = ctx.tmp / "a-file"
    p.write_text("a file, not a directory\n")
    return str(p)


def _plan_out_file(ctx: Ctx) -> list[str]:
    return ["plan", str(demo_config(ctx)), "--out", _a_file(ctx), "--no-progress"]


def _export(ctx: Ctx, target: str) -> list[str]:
    return ["export", str(run_dir(ctx)), "-o", target]


def _export_link(ctx: Ctx) -> list[str]:
    """-o is a link to another directory (the victim's): an export must not land there."""
    elsewhere = ctx.tmp / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, ctx.tmp / "hf")
    return _export(ctx, str(ctx.tmp / "hf"))


def _export_not_empty(ctx: Ctx) -> list[str]:
    d = ctx.tmp / "hf"
    d.mkdir()
    (d / "keep.txt").write_text("a user's file\n")
    return _export(ctx, str(d))


def _sparse_judge_template(ctx: Ctx) -> list[str]:
    t = sparse_file(ctx.tmp / "judge.txt", 200 << 20)
    return _demo_plan(ctx, genrm_judge__template_file=str(t))


def _sparse_hf_config(ctx: Ctx) -> list[str]:
    d = ctx.tmp / "hf-model"
    d.mkdir()
    sparse_file(d / "config.json", 200 << 20)
    return _demo_plan(ctx, actor=str(d))


CASES: tuple[Case, ...] = (
    # -- links under --out: every output replaces a planted link, never writes through it
    Case("plan-links-at-outputs", "links", "plan.yaml, ranking.csv, timeline.json and their "
         "`.tmp` names are links out of --out",
         lambda c: (plant_links(c, ("plan.yaml", "ranking.csv", "timeline.json", "timeline.png")),
                    _demo_plan(c))[1],
         outcome=WRITTEN_SAFELY, after=_out_regular(("plan.yaml", "ranking.csv", "timeline.json"))),
    Case("plan-links-at-json-and-emit", "links", "summary.json and emit-verl.sh (`--json`, "
         "`--emit verl`) and their `.tmp` names are links out of --out",
         lambda c: (plant_links(c, ("summary.json", "emit-verl.sh")),
                    _demo_plan(c, "--json", "--emit", "verl"))[1],
         outcome=WRITTEN_SAFELY, after=_out_regular(("summary.json", "emit-verl.sh"))),
    Case("export-out-is-a-link", "links", "yatt export RUN -o LINK (a link to another directory)",
         _export_link, "hf", "-o", "is a link"),
    Case("replay-links-at-outputs", "links", "replay's timeline and scaling files are links",
         lambda c: (plant_links(c, ("replay_timeline.json", "replay_timeline.png", "scaling.csv",
                                    "scaling.png")), _replay(c, write_trace(c)))[1],
         outcome=WRITTEN_SAFELY, after=_out_regular(("replay_timeline.json", "scaling.csv"))),
    # -- decompression bombs and huge files: refused within the caps, read in bounded memory
    Case("trace-gzip-4gb-line", "bombs", "a 4 MB .jsonl.gz holding one 4 GiB line",
         lambda c: _replay(c, gzip_bomb(c.tmp / "bomb.jsonl.gz", b"a" * (1 << 20), 4096)),
         "bomb.jsonl.gz", "line 1", "YATT_TRACE_MAX_LINE_BYTES"),
    Case("trace-gzip-blank-lines", "bombs", "a 4 MB .jsonl.gz of 4 GiB of newlines",
         lambda c: _replay(c, gzip_bomb(c.tmp / "blank.jsonl.gz", b"\n" * (1 << 20), 4096)),
         "blank.jsonl.gz", "", "YATT_TRACE_MAX_BYTES"),
    Case("trace-gzip-space-lines", "bombs", "a .jsonl.gz of 4 GiB of lines holding one space",
         lambda c: _replay(c, gzip_bomb(c.tmp / "spaces.jsonl.gz", b" \n" * (1 << 19), 4096)),
         "spaces.jsonl.gz", "", "YATT_TRACE_MAX_BYTES"),
    Case("trace-20mb-line", "bombs", "a plain trace whose second line is 20 MB",
         lambda c: _replay(c, write_trace(c, lines=trace_lines()[:1] + ["[" + "1," * (10 << 20) + "1]"])),
         "trace.jsonl", "line 2", "YATT_TRACE_MAX_LINE_BYTES"),
    Case("config-200mb", "bombs", "a 200 MB config file", lambda c: ["plan", str(
         sparse_file(c.tmp / "huge.yaml", 200 << 20)), "--out", str(c.out), "--no-progress"],
         "huge.yaml", "", "YATT_CONFIG_MAX_BYTES"),
    Case("profile-200mb", "bombs", "a 200 MB profile file", _sparse_profile, "profile.yaml", "",
         "YATT_CONFIG_MAX_BYTES"),
    Case("judge-template-file-200mb", "bombs", "genrm_judge.template_file names a 200 MB file",
         _sparse_judge_template, "judge.txt", "genrm_judge.template_file", "YATT_CONFIG_MAX_BYTES"),
    Case("hf-config-json-200mb", "bombs", "actor: a model directory whose config.json is 200 MB",
         _sparse_hf_config, "config.json", "actor", "YATT_CONFIG_MAX_BYTES"),
    # -- sizes: flags and inputs past their ceilings or past the work budget
    Case("gpus-80-million", "sizes", "--gpus 80000000", lambda c: _demo_plan(c, "--gpus", "80000000"),
         "", "--gpus", "at most 100000"),
    Case("gpus-3000-sizes", "sizes", "--gpus with 3,000 sizes",
         lambda c: _demo_plan(c, "--gpus", ",".join(["2"] * 3000)), "", "--gpus", "at most 64"),
    Case("gpus-empty", "sizes", "--gpus ''", lambda c: _demo_plan(c, "--gpus", ""), "", "--gpus",
         "comma-separated integers"),
    Case("top-a-million", "sizes", "--top 1000000", lambda c: _demo_plan(c, "--top", "1000000"),
         "", "--top", "<= 100"),
    Case("name-100k-chars", "sizes", "an experiment name of 100,000 characters",
         lambda c: _big_name(c, 100_000), "exp.yaml", "name", "at most 65,536"),
    Case("replay-100k-gpus", "sizes", "a trace recorded on 100k GPUs, replayed (within the "
         "ceiling, past the work budget)", _meta_100k, "trace.jsonl", "--gpus", "YATT_MAX_SIM_WORK"),
    Case("calibrate-past-budget", "sizes", "calibrate with YATT_MAX_SIM_WORK=1000",
         _budget_env, "", "TRACE", "YATT_MAX_SIM_WORK"),
    # -- names shown as rich markup, terminal control bytes, a name that stalls the highlighter
    Case("name-markup", "markup", "experiment name `x[/]`", lambda c: _demo_plan(c, name="x[/] [bold]"),
         outcome=PRINTED_AS_TEXT, after=_said("x[/] [bold]")),
    Case("name-escape-bytes", "markup", "experiment name holding ESC [31m and a bidi override",
         lambda c: _demo_plan(c, name="a\x1b[31mred\u202e"), outcome=PRINTED_AS_TEXT,
         after=_said("a\\x1b[31mred\\u202e", absent=("\x1b[31m", "\u202e"))),
    Case("name-60k-chars", "markup", "an experiment name of 60,000 characters (allowed)",
         lambda c: _big_name(c, 60_000), outcome=PRINTED_AS_TEXT, after=_said("60,000")),
    Case("out-path-markup", "markup", "--out path holding `[/]`",
         lambda c: ["plan", str(demo_config(c)), "--out", str(c.tmp / "o[/]ut"), "--no-progress"],
         outcome=PRINTED_AS_TEXT, after=_said("o[/]ut")),
    Case("trace-path-markup-and-dollars", "markup", "a trace named `t[/]$x$.jsonl` (markup; "
         "matplotlib math in a title)", lambda c: _replay(c, write_trace(c, "t[/]$x$.jsonl")),
         outcome=PRINTED_AS_TEXT, after=_said("t[/]$x$.jsonl")),
    # -- outputs that cannot be written: refused before any work, for every verb
    Case("plan-out-is-a-file", "unwritable out", "yatt plan --out FILE", _plan_out_file, "a-file",
         "--out", "not a directory"),
    Case("plan-out-dev-null", "unwritable out", "yatt plan --out /dev/null",
         _unwritable("plan", "/dev/null"), "/dev/null", "--out", "not a directory"),
    Case("plan-out-proc-self", "unwritable out", "yatt plan --out /proc/self",
         _unwritable("plan", "/proc/self"), "/proc/self", "--out", "cannot write there"),
    Case("plan-out-sys-kernel", "unwritable out", "yatt plan --out /sys/kernel (refuses new files)",
         _unwritable("plan", "/sys/kernel"), "/sys/kernel", "--out", "cannot write there"),
    Case("replay-out-dev-null", "unwritable out", "yatt replay --out /dev/null",
         _unwritable("replay", "/dev/null"), "/dev/null", "--out", "not a directory"),
    Case("calibrate-profile-without-tables", "flags", "yatt calibrate T --profile P, P with "
         "efficiencies only (no contention ratios to fit)",
         lambda c: _calibrate_profile(c, "efficiency: {train_mfu: 0.4}\n"), "profile.yaml",
         "--profile", "has no tables"),
    Case("calibrate-profile-and-start", "flags", "yatt calibrate T --profile P --start P",
         lambda c: _calibrate_profile(c, "efficiency: {train_mfu: 0.4}\n", "--start",
                                      str(c.tmp / "profile.yaml")), "", "--start",
         "one of --start"),
    Case("calibrate-out-proc-self", "unwritable out", "yatt calibrate -o /proc/self/p.yaml",
         _unwritable("calibrate", "/proc/self/p.yaml"), "/proc/self/p.yaml", "--output",
         "cannot write there"),
    Case("run-out-dev-null", "unwritable out", "yatt run --out /dev/null, before planning",
         _unwritable("run", "/dev/null"), "/dev/null", "--out", "not a directory"),
    Case("run-checkpoints-is-a-file", "unwritable out", "yatt run --out OUT, OUT/checkpoints a "
         "file", _ckpt_dir("file"), "checkpoints", "checkpoint directory", "not a directory"),
    Case("run-checkpoints-dangling-link", "unwritable out", "yatt run --out OUT, OUT/checkpoints "
         "a link to nowhere (missing, not creatable)", _ckpt_dir("link"), "checkpoints",
         "checkpoint directory", "is a link"),
    Case("run-checkpoints-read-only", "unwritable out", "yatt run --out OUT, OUT/checkpoints "
         "read-only", _ckpt_dir("read-only"), "checkpoints", "checkpoint directory",
         "cannot write there"),
    Case("profile-out-under-dev-null", "unwritable out", "yatt profile -o /dev/null/p.yaml",
         _unwritable("profile", "/dev/null/p.yaml"), "/dev/null/p.yaml", "--out", "does not exist"),
    Case("plan-json-proc-self", "unwritable out", "yatt plan --json /proc/self/summary.json, "
         "before the search", lambda c: _demo_plan(c, "--json", "/proc/self/summary.json"),
         "/proc/self/summary.json", "--json", "cannot write there"),
    Case("export-out-dev-null", "unwritable out", "yatt export RUN -o /dev/null",
         lambda c: _export(c, "/dev/null"), "/dev/null", "-o", "not an empty directory"),
    Case("export-out-under-proc-self", "unwritable out", "yatt export RUN -o /proc/self/hf",
         lambda c: _export(c, "/proc/self/hf"), "/proc/self/hf", "-o", "cannot write there"),
    Case("export-out-not-empty", "unwritable out", "yatt export RUN -o DIR holding a file",
         _export_not_empty, "hf", "-o", "not an empty directory"),
    # -- an output that is an input
    Case("calibrate-output-is-input", "output is input", "yatt calibrate T -o T", _calibrate_self,
         "trace.jsonl", "--output", "is also an input"),
    Case("profile-output-is-input", "output is input", "yatt profile C -o C",
         lambda c: ["profile", str(demo_config(c)), "-o", str(c.tmp / "exp.yaml")], "exp.yaml",
         "--out", "is also an input"),
    Case("plan-out-holds-input", "output is input", "yatt plan OUT/plan.yaml --out OUT",
         _out_holds_input, "out", "--out", "would overwrite the input"),
    Case("plan-json-is-input", "output is input", "yatt plan C --json C",
         lambda c: _demo_plan(c, "--json", str(c.tmp / "exp.yaml")), "exp.yaml", "--json",
         "is also an input"),
    # -- run directories given to --resume
    Case("resume-plain-file", "resume files", "--resume names a file", _plain_file_run_dir, "run",
         "--resume", "not a yatt run directory", needs="exec"),
    Case("resume-run-json-not-json", "resume files", "run.json is not JSON",
         lambda c: _resume(c, run_json="steps: [\n"), "run.json", "line 1", "not valid JSON",
         needs="exec"),
    Case("resume-run-json-no-seed", "resume files", "run.json without a seed",
         lambda c: _resume(c, run_json='{"steps": 3, "controllers": 1}'), "run.json", "seed",
         "missing required field", needs="exec"),
    Case("resume-run-json-str-seed", "resume files", "run.json with seed \"7\"",
         lambda c: _resume(c, run_json='{"steps": 3, "seed": "7", "controllers": 1}'), "run.json",
         "seed", "allowed: an integer", needs="exec"),
    Case("resume-run-json-steps-1e400", "resume files", "run.json with steps 1e400",
         lambda c: _resume(c, run_json='{"steps": 1e400, "seed": 0, "controllers": 1}'),
         "run.json", "steps", "allowed: an integer", needs="exec"),
    Case("resume-manifest-dotdot", "resume files", "a manifest entry ../../../../etc/passwd",
         lambda c: _resume(c, manifest={"../../../../etc/passwd": {"sha256": "0" * 64, "bytes": 1}}),
         "", "--resume", "leaves the checkpoint directory", needs="exec",
         after=_said(absent=("bytes, manifest says",))),
    Case("resume-manifest-absolute", "resume files", "a manifest entry /etc/hostname",
         lambda c: _resume(c, manifest={"/etc/hostname": {"sha256": "0" * 64, "bytes": 1}}),
         "", "--resume", "leaves the checkpoint directory", needs="exec",
         after=_said(absent=("bytes, manifest says",))),
    # -- environment read before anything starts
    Case("faults-env-bad", "faults env", "YATT_FAULTS=trainer.explode@x", _faults, "",
         "YATT_FAULTS", "ROLE.EVENT@N"),
    Case("host-check-env-bad", "host check env", "YATT_HOST_CHECK=maybe", _host_check_env, "",
         "YATT_HOST_CHECK", "on|off"),
)


# ---- tampered checkpoints (a real trainer checkpoint, ctx.checkpoint) -----------------------
class _Payload:
    """Pickles to `os.system("touch MARKER")`: what a tampered file would run on load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def _state(**over) -> dict:
    return {"format": "yatt.checkpoint/1", "step": 0, "next_step": 1, "seed": 0, "total_steps": 3,
            "trace_end_s": 1.0, "metrics": [], "extra": {}, **over}


def _tampered(tamper: Callable[[Ctx, Path], None], rehash: bool = True) -> Callable[[Ctx], list[str]]:
    """A run directory whose one checkpoint is a real trainer checkpoint plus state.json,
    changed by `tamper`, with the manifest rewritten to match (as an attacker would)."""
    def build(ctx: Ctx) -> list[str]:
        import shutil

        from yatt.exec import checkpoint as ckpt

        assert ctx.checkpoint is not None, "needs a trainer checkpoint"
        d = run_dir(ctx)
        c = d / "checkpoints" / "step-000000"
        shutil.copytree(ctx.checkpoint, c / "trainer")
        (c / "state.json").write_text(json.dumps(_state()))
        (c / "trace.jsonl").write_text("\n".join(trace_lines()) + "\n")
        ckpt.write_manifest(c)
        tamper(ctx, c)
        if rehash:
            ckpt.write_manifest(c)
        return ["run", "--resume", str(d), "--no-progress"]
    return build


def _pickle_common(ctx: Ctx, c: Path) -> None:
    import torch
    torch.save({"counters": _Payload(ctx.tmp / MARKER)}, c / "trainer" / "common.pt")


def _pickle_metadata(ctx: Ctx, c: Path) -> None:
    import pickle
    (c / "trainer" / ".metadata").write_bytes(pickle.dumps(_Payload(ctx.tmp / MARKER)))


def _pickle_object(ctx: Ctx, c: Path) -> None:
    """The RNG state object inside a .distcp file replaced by a payload (the metadata, still
    plain, points at it): what torch's load_bytes would unpickle."""
    import dataclasses as dc
    import io
    import pickle

    import torch
    md_path = c / "trainer" / ".metadata"
    md = pickle.loads(md_path.read_bytes())   # the test's own, untampered file
    idx = next(i for i in md.storage_data if i.fqn.startswith("rng_state"))
    info = md.storage_data[idx]
    buf = io.BytesIO()
    torch.save(_Payload(ctx.tmp / MARKER), buf)
    f = c / "trainer" / info.relative_path
    offset = f.stat().st_size
    with open(f, "ab") as out:
        out.write(buf.getvalue())
    md.storage_data[idx] = dc.replace(info, offset=offset, length=len(buf.getvalue()))
    md_path.write_bytes(pickle.dumps(md))


def _write(name: str, data: bytes) -> Callable[[Ctx, Path], None]:
    def tamper(ctx: Ctx, c: Path) -> None:
        (c / name).write_bytes(data.replace(b"@MARKER@", str(ctx.tmp / MARKER).encode()))
    return tamper


def _pickled_file(name: str) -> Callable[[Ctx, Path], None]:
    def tamper(ctx: Ctx, c: Path) -> None:
        import pickle
        (c / name).write_bytes(pickle.dumps(_Payload(ctx.tmp / MARKER)))
    return tamper


CHECKPOINT_CASES: tuple[Case, ...] = (
    Case("resume-pickle-in-common-pt", "code execution", "common.pt holds a pickled `__reduce__` "
         "payload", _tampered(_pickle_common), "common.pt", "--resume", "not a plain tensor file",
         needs="checkpoint"),
    Case("resume-pickle-in-metadata", "code execution", "the .metadata file is a pickled payload",
         _tampered(_pickle_metadata), ".metadata", "--resume", "posix.system", needs="checkpoint"),
    Case("resume-pickle-in-distcp-object", "code execution", "the RNG object inside a .distcp "
         "file is a pickled payload", _tampered(_pickle_object), "rng_state", "--resume",
         "not a plain tensor file", needs="checkpoint"),
    Case("resume-pickle-as-state-json", "code execution", "state.json is a pickled payload",
         _tampered(_pickled_file("state.json")), "state.json", "line 1", "not UTF-8",
         needs="checkpoint"),
    Case("resume-pickle-as-manifest", "code execution", "manifest.json is a pickled payload",
         _tampered(_pickled_file("manifest.json"), rehash=False), "manifest.json", "--resume",
         "unreadable manifest", needs="checkpoint"),
    Case("resume-state-json-str-next-step", "resume files", "state.json with next_step \"1\"",
         _tampered(_write("state.json", json.dumps(_state(next_step="1")).encode())), "state.json",
         "next_step", "allowed: an integer", needs="checkpoint"),
    Case("resume-state-json-no-seed", "resume files", "state.json without a seed",
         _tampered(_write("state.json", json.dumps({k: v for k, v in _state().items()
                                                    if k != "seed"}).encode())),
         "state.json", "seed", "missing required field", needs="checkpoint"),
    Case("resume-state-json-not-json", "resume files", "state.json is not JSON",
         _tampered(_write("state.json", b"{'step': 0")), "state.json", "line 1", "not valid JSON",
         needs="checkpoint"),
)
ALL_CASES = CASES + CHECKPOINT_CASES


# ---- running one case ---------------------------------------------------------------------
def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_BYTES, AS_BYTES))


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: its kind and content (links: their target; big files:
    size and mtime, so a sparse 200 MB file is not read)."""
    out: dict[str, tuple] = {}
    for top, dirs, files in os.walk(root, followlinks=False):
        for n in dirs + files:
            p = Path(top) / n
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            elif st.st_size > 1 << 20:
                out[rel] = ("big", st.st_size, st.st_mtime_ns)
            else:
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def run(argv: list[str], ctx: Ctx) -> Result:
    """`python -m yatt.cli ARGV` under the caps; CPU and peak memory of that process tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("YATT_") or k == "YATT_CACHE"}
    # the host check's probe (torch, seconds) is not what a hostile case measures; a case
    # that tests its environment variable sets it in ctx.env
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", YATT_HOST_CHECK="off")
    env.update(ctx.env)
    p = subprocess.Popen([sys.executable, "-m", "yatt.cli", *argv], cwd=ctx.tmp, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_cap)
    got: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, s=s: got.__setitem__(k, s.read()))
               for k, s in (("out", p.stdout), ("err", p.stderr))]
    for t in readers:
        t.start()
    timer = threading.Timer(WALL_S, p.kill)
    timer.start()
    _, status, ru = os.wait4(p.pid, 0)
    timed_out = not timer.is_alive()
    timer.cancel()
    for t in readers:
        t.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    return Result(argv, p.returncode, got["out"].decode("utf-8", "replace"),
                  got["err"].decode("utf-8", "replace"), ru.ru_utime + ru.ru_stime,
                  ru.ru_maxrss / 1024, timed_out)


def run_case(case: Case, tmp: Path, checkpoint: Optional[Path] = None) -> Result:
    """Build `case` in `tmp`, run it, and hold it to the rules (see the module doc)."""
    ctx = Ctx(tmp, {}, checkpoint)
    ctx.victim.write_text("the file a hostile input aims at\n")
    argv = case.build(ctx)
    try:
        before = snapshot(tmp)
        r = run(argv, ctx)
        after = snapshot(tmp)
    finally:
        for cmd in ctx.cleanup:
            subprocess.run(cmd, capture_output=True)
    text = r.stdout + r.stderr
    assert not r.timed_out, f"{case.name}: still running after {WALL_S} s"
    assert "Traceback" not in text, f"{case.name}: {r.stderr[-3000:]}"
    assert r.cpu_s <= CPU_S, f"{case.name}: {r.cpu_s:.1f} s of CPU"
    assert r.rss_mb <= RSS_MB, f"{case.name}: {r.rss_mb:.0f} MB"
    assert not (tmp / MARKER).exists(), f"{case.name}: a pickled payload ran"
    if case.outcome == REFUSED:
        assert r.rc == 2, f"{case.name}: exit {r.rc}: {r.stderr[-2000:]}"
        lines = r.stderr.splitlines()
        assert len(lines) == 1, f"{case.name}: {len(lines)} stderr lines: {r.stderr[-2000:]}"
        line = lines[0]
        assert line.startswith(f"yatt {argv[0]}: error: "), line
        for frag in (case.file, case.field, case.message):
            assert frag in line, f"{case.name}: {frag!r} not in: {line}"
        made = {k: v for k, v in after.items() if k not in before}
        assert set(made) <= {"out"} and all(v == ("dir",) for v in made.values()), \
            f"{case.name}: wrote {sorted(made)}"
        changed = [k for k in before if after.get(k) != before[k]]
        assert not changed, f"{case.name}: changed {changed}"
    else:
        assert r.rc == 0, f"{case.name}: exit {r.rc}: {r.stderr[-2000:]}"
        outside = {k: v for k, v in after.items() if not k.startswith("out/") and k != "out"}
        kept = {k: v for k, v in before.items() if not k.startswith("out/") and k != "out"}
        assert {k: v for k, v in outside.items() if k in kept} == kept, f"{case.name}: touched inputs"
        assert ctx.victim.read_text() == "the file a hostile input aims at\n"
    if case.after is not None:
        case.after(ctx, r)
    return r


# ---- the report ---------------------------------------------------------------------------
def corpus() -> list[tuple[str, str, str]]:
    """(kind, file, expectation) of every file of the corpus under tests/data/bad."""
    rows = []
    for kind in ("config", "plan", "trace", "profile", "placement", "job", "job-runtime"):
        d = BAD / kind
        side = yaml.safe_load((d / "EXPECT.yaml").read_text()) if (d / "EXPECT.yaml").is_file() else {}
        for p in sorted(d.iterdir()):
            if p.name == "EXPECT.yaml" or p.is_dir():   # a case's data files live in dirs
                continue
            text = side.get(p.name) or p.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
            rows.append((kind, p.name, text.removeprefix("# expect: ")))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report() -> str:
    """docs/hostile-inputs.md: counts per class and every case with its outcome."""
    cases = ALL_CASES
    rows = corpus()
    kinds: dict[str, int] = {}
    for k, _, _ in rows:
        kinds[k] = kinds.get(k, 0) + 1
    classes: dict[str, list[Case]] = {}
    for c in cases:
        classes.setdefault(c.klass, []).append(c)
    lines = [
        "# Hostile inputs",
        "",
        "Generated by `python tests/cli/_hostile_cases.py > docs/hostile-inputs.md`; "
        "`tests/cli/test_hostile_built.py` fails when it is stale. Every row is a test.",
        "",
        f"{len(rows) + len(cases)} hostile cases: {len(rows)} files in the corpus "
        f"(`tests/data/bad`) and {len(cases)} built at test time "
        "(`tests/cli/_hostile_cases.py`: too large for the repository, or made of links, "
        "permissions and run directories). Each runs as its own `yatt` process with a 1 GB "
        f"address-space cap and must stay within {CPU_S:g} s of CPU and {RSS_MB} MB, print no "
        "traceback, and touch nothing outside its output directory. A refused input exits "
        "with status 2 and one line naming the file and the field; nothing is written. The "
        "limits themselves are listed in docs/config.md (Limits).",
        "",
        "| class | cases | outcome |",
        "|---|---|---|",
    ]
    for k, n in kinds.items():
        lines.append(f"| corpus: {k} files | {n} | refused |")
    for klass, cs in classes.items():
        outcomes = sorted({c.outcome for c in cs})
        lines.append(f"| {klass} | {len(cs)} | {', '.join(outcomes)} |")
    lines.append(f"| **total** | **{len(rows) + len(cases)}** | |")
    lines += ["", "## Built at test time", "",
              "| case | class | input | outcome | the line names |", "|---|---|---|---|---|"]
    for c in cases:
        said = " / ".join(x for x in (c.field, c.message) if x) if c.outcome == REFUSED else ""
        lines.append(f"| `{c.name}` | {c.klass} | {_cell(c.what)} | {c.outcome} | {_cell(said)} |")
    lines += ["", "## Corpus", "", "| file | the line names (field / message) |", "|---|---|"]
    for kind, name, text in rows:
        lines.append(f"| `{kind}/{_cell(name)}` | {_cell(text.replace(' | ', ' / '))} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(report())

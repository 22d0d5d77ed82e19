"""One way for every bench to record its result: `bench/results/NAME.json` plus a short
generated `NAME.md` table (date, host, command, the headline numbers).

    from _results import write_result          # bench/*.py (bench/ is on sys.path)
    write_result(path, data)                   # adds data["_meta"] = {date, host, command}

    python bench/_results.py                   # regenerate every NAME.md from its NAME.json
    python bench/_results.py --check           # exit 1 if an .md is stale (the tests do this)

Why: a measurement belongs in a file with its provenance, not in prose. The JSON is the
record; the .md is derived from it only, so it can always be regenerated, and docs link to
the .md tables. This module imports nothing beyond the standard library.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"


# ---- writing ---------------------------------------------------------------------------
def host_description() -> str:
    """The machine in words: CPU model, cores, memory, Python (GPU benches add the device)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}, Python {platform.python_version()}"


def meta(command: str | None = None, host: str | None = None) -> dict[str, str]:
    """Provenance of a result written now."""
    cmd = command or " ".join(["python"] + [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    return {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "host": host or host_description(), "command": cmd}


def write_result(path: str | Path, data: dict, *, command: str | None = None,
                 host: str | None = None, indent: int = 1) -> Path:
    """Write `data` to PATH.json with fresh `_meta` provenance, and its table to PATH.md."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"_meta": meta(command, host), **{k: v for k, v in data.items() if k != "_meta"}}
    path.write_text(json.dumps(data, indent=indent, default=str) + "\n")
    path.with_suffix(".md").write_text(render(path.stem, data))
    return path


# ---- rendering -------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.4g}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    return str(v).replace("|", "\\|").replace("\n", " ")


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%"


def _apct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(x if isinstance(x, str) else _fmt(x) for x in r) + " |" for r in rows]
    return out + [""]


def _scalars(d: dict, prefix: str = "", depth: int = 2) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for k, v in d.items():
        if k == "_meta":
            continue
        if isinstance(v, dict) and depth > 1:
            rows += _scalars(v, f"{prefix}{k}.", depth - 1)
        elif not isinstance(v, (dict, list)) or (isinstance(v, list) and len(v) <= 6
                                                 and all(not isinstance(x, (dict, list)) for x in v)):
            rows.append([f"`{prefix}{k}`", _fmt(v)])
    return rows


def _generic(d: dict) -> list[str]:
    return _table(["field", "value"], _scalars(d))


def _checkpoint(d: dict) -> list[str]:
    rows = []
    for r in (d, d.get("also")):
        if not r:
            continue
        runs = r.get("runs", {})
        ck, fork = runs.get("async", {}), runs.get("async_process", {})
        rows.append([r.get("config"), r.get("plan"), r.get("step_s"),
                     f"{_fmt(r.get('stall_s'))} ({_apct(r.get('stall_ratio'))})",
                     f"{_fmt(ck.get('step_s'))} ({_apct(r.get('cost_ratio'))})",
                     f"{_fmt(fork.get('step_s'))} ({_apct(r.get('process_cost_ratio'))})",
                     f"{_fmt(r.get('sync_stall_s'))} ({_apct(r.get('sync_stall_ratio'))})",
                     f"{_fmt(r.get('snapshot_s'))} ({_apct(r.get('snapshot_ratio'))})",
                     f"{_fmt(r.get('overhead_s'))} ({_apct(r.get('overhead_frac'))})",
                     ck.get("checkpoint_mb")])
    return (["A checkpoint after every step; seconds per step (share of the step without "
             "checkpoints). \"all in\": the step with asynchronous checkpoints plus its stall, "
             "over the step without, minus 1 (the write runs during the next step): by a thread "
             "of the trainer (the CPU default) or by megatron's forked writer. Overhead: step "
             "time in which no traced phase ran, run without checkpoints.", ""]
            + _table(["config", "plan", "step s (no checkpoint)", "stall s, async",
                      "step s, async (all in)", "step s, forked writer (all in)", "stall s, sync",
                      "in-memory snapshot s", "overhead s", "checkpoint MB"], rows))


def _snapshot(d: dict) -> list[str]:
    rows = [[r.get("model"), r.get("params"), r.get("state_mb"), r.get("store_snapshot_s"),
             r.get("file_snapshot_s"), r.get("snapshot_speedup"), r.get("store_restore_s"),
             r.get("file_restore_s"), r.get("restore_speedup")] for r in d.get("models", [])]
    return ([f"One trainer rank after a training step; medians over {d.get('reps')} interleaved "
             "rounds. Store: the state cloned and serialised into the Ray object store (a run "
             "spanning nodes); file: copied into the rank's host file (a run on one node).", ""]
            + _table(["model", "parameters", "state MB", "snapshot s, store", "snapshot s, file",
                      "speed-up", "restore s, store", "restore s, file", "speed-up"], rows))


def _controllers(d: dict) -> list[str]:
    out: list[str] = []
    for job in [d, *d.get("larger", [])]:
        rows = [[k, r.get("driver_peak_over_base_mb"), r.get("steady_step_s"), r.get("samples_per_s")]
                for k, r in job.get("results", {}).items()]
        w = job.get("workload", {})
        out += ([f"Plan `{job.get('plan')}`; workload: " + ", ".join(f"{k} {v}" for k, v in w.items()), ""]
                + _table(["controllers", "driver peak RSS over base, MB", "steady s/step", "samples/s"], rows))
        if job.get("verdict"):
            out += [f"- {job['verdict']}", ""]
    return out


def _faults(d: dict) -> list[str]:
    rows = [[kind, "yes" if k.get("survived") else "NO", k.get("step", ""),
             k.get("recovery_s", ""), k.get("signal_to_exit_s", ""), k.get("resume_s", ""),
             k.get("steps_redone", ""), k.get("note", k.get("error", ""))]
            for kind, k in d.get("kinds", {}).items()]
    return ([f"Plan `{d.get('plan')}` ({d.get('config')}, {d.get('steps')} steps, a checkpoint "
             f"every step, distributed optimizer); reference run {d.get('reference_wall_s')} s. "
             "Survived: metrics.csv equal to the reference and every sample exactly once.", ""]
            + _table(["fault", "survived", "step", "recovery s", "signal to exit s",
                      "resume s", "steps redone", "note"], rows))


def _fidelity(d: dict) -> list[str]:
    rows = [[c["case"], c.get("plan"), c.get("measured_step_s"), c.get("predicted_step_s"),
             _pct(c.get("err")), _pct(c.get("budget_only_err")), _pct(c.get("replay_err")),
             c.get("host_ratio")] for c in d.get("cases", [])]
    out = [f"Profile `{d.get('profile')}`, contention from `{d.get('contention_source')}`; "
           "step time = median over the steps after step 0.", ""]
    out += _table(["case", "plan", "measured s/step", "predicted s/step", "error", "error, no EOS",
                   "replay error", "host ratio"], rows)
    out += _table(["summary", "median", "max"], [
        ["end to end, a priori", _apct(d.get("median_abs_err")), _apct(d.get("max_abs_err"))],
        ["end to end, replay of measured lengths", _apct(d.get("replay_median_abs_err")),
         _apct(d.get("replay_max_abs_err"))],
        *([["end to end, `yatt run`'s own line (replay, host-rescaled profile)",
            _apct(d.get("run_line_median_abs_err")), _apct(d.get("run_line_max_abs_err"))]]
          if d.get("run_line_median_abs_err") is not None else []),
        ["end to end, every response at its budget (no EOS)", _apct(d.get("budget_only_median_abs_err")),
         _apct(d.get("budget_only_max_abs_err"))],
        ["per phase, replay", _apct(d.get("phase_median_abs_err")), _apct(d.get("phase_max_abs_err"))],
        ["per phase, a priori", _apct(d.get("phase_predicted_median_abs_err")), "-"],
        ["per phase, step-to-step spread of the measurement", _apct(d.get("phase_step_spread_median")), "-"],
        ["end to end, scaled by the host probe", _apct(d.get("drift_adjusted_median_abs_err")),
         _apct(d.get("drift_adjusted_max_abs_err"))],
    ])
    phases = sorted({ph for c in d.get("cases", []) for ph in c.get("phases", {})})
    if phases:
        out += ["Per phase: replay error (measured busy seconds per step in brackets).", ""]
        out += _table(["case", *phases], [
            [c["case"], *[(f"{_pct(c['phases'][ph].get('replay_err'))} ({_fmt(c['phases'][ph].get('measured_s'))})"
                           if ph in c.get("phases", {}) else "-") for ph in phases]]
            for c in d.get("cases", [])])
    out += _table(["workload", "planner's mode", "measured faster", "gap", "regret", "correct"],
                  [[m["workload"], m["planner_mode"], m["measured_faster"], _apct(m.get("measured_gap")),
                    _apct(m.get("regret")), m.get("correct")] for m in d.get("mode_choice", [])])
    return out + _fidelity_columns(d)


def _choices(ch: list) -> str:
    """Each workload's chosen mode and what it cost against the measured fastest."""
    return ", ".join(f"{m['workload']} {m['planner_mode']}"
                     + (f" ({_apct(m['regret'])})" if m.get("regret") is not None else "")
                     for m in ch)


def _fidelity_columns(d: dict) -> list[str]:
    """The three a-priori columns (profile as is, rescaled to the host, a fresh quick
    profile) per case and summarised, where the result has them."""
    cols = [c for c in d.get("columns", []) if c in d.get("column_summary", {})]
    if not cols:
        return []
    q = d.get("quick_profile") or {}
    cases = d.get("cases", [])
    # results that rescaled the quick profile too record its as-is error beside
    q_as_is = any("quick_as_is_err" in c.get("columns", {}).get("quick", {}) for c in cases)
    out = ["A priori, three profiles over the same runs: the profile as is, rescaled to this "
           "host by the probe timed before each run, and a fresh `yatt profile --quick`"
           + (f" ({q.get('wall_s')} s to make; `{q.get('path')}`)" if q else "")
           + (", rescaled by the same probe (its as-is error beside it)" if q_as_is else "")
           + ".", ""]
    out += _table(["case", "measured s/step", *[f"{c} s/step (error)" for c in cols],
                   *(["quick as is, error"] if q_as_is else []), "host ratio before"], [
        [c["case"], c.get("measured_step_s"),
         *[(f"{_fmt(c['columns'][k]['predicted_step_s'])} ({_pct(c['columns'][k]['err'])})"
            if k in c.get("columns", {}) else "-") for k in cols],
         *([_pct(c["columns"].get("quick", {}).get("quick_as_is_err"))] if q_as_is else []),
         (c.get("host_ratios_before") or {}).get("whole")] for c in cases])
    s = d["column_summary"]
    out += _table(["column", "end to end median", "max", "per phase median", "per phase max",
                   "mode choice correct", "choices (regret)"],
                  [[k, _apct(s[k].get("median_abs_err")), _apct(s[k].get("max_abs_err")),
                    _apct(s[k].get("phase_median_abs_err")), _apct(s[k].get("phase_max_abs_err")),
                    s[k].get("mode_choice_correct"), _choices(s[k].get("mode_choice", []))]
                   for k in cols])
    lack = {n: m for n, m in (q.get("missing_terms") or {}).items() if m}
    if q:
        out += [f"Quick profile terms not measured: {_fmt(sorted(lack)) if lack else 'none'}.", ""]
    return out


def _genrm_stream(d: dict) -> list[str]:
    ends = [r.get("end_s") for r in d.get("runs", [])]
    return _table(["quantity", "value"], [
        ["arrivals (s after phase start, judgments)", "; ".join(f"{a} s: {n}" for a, n in d.get("arrivals", []))],
        ["prompt / output tokens per judgment", f"{d.get('prompt_tokens')} / {d.get('output_tokens')}"],
        ["measured end, s (each run)", _fmt(ends)],
        ["simulated end, s (with / without the join term)",
         f"{_fmt(d.get('simulated_end_s'))} / {_fmt(d.get('simulated_end_s_without_join'))}"],
        ["plain engine step, s: measured median / profile",
         f"{_fmt(d.get('plain_step_s_median'))} / {_fmt(d.get('profile_plain_step_s'))}"],
        ["mixed step extra per admitted request, s: measured / profile join / profile prefill",
         f"{_fmt(d.get('mixed_extra_s_per_request_median'))} / {_fmt(d.get('profile_join_s_per_request'))}"
         f" / {_fmt(d.get('profile_prefill_s_per_request'))}"],
    ])


def _gpu(d: dict) -> list[str]:
    env, der = d.get("env", {}), d.get("derived", {})
    out = [f"Device: {env.get('name')} ({env.get('sms')} SMs; {env.get('nvidia_smi')}), "
           f"torch {env.get('torch')}, CUDA {env.get('cuda')}.", ""]
    dates: dict[str, list[str]] = {}
    for section, when in (d.get("section_date") or {}).items():
        dates.setdefault(when, []).append(section)
    if len(dates) > 1:   # a --merge result: say which section was measured when
        out += ["Measured: " + "; ".join(f"{', '.join(s)} on {w}" for w, s in sorted(dates.items())) + ".", ""]
    rows = [["bf16 GEMM ceiling, TFLOP/s", der.get("bf16_matmul_tflops")],
            ["device memory read, GB/s", der.get("hbm_read_gbps")],
            ["device memory copy, GB/s", der.get("hbm_copy_gbps")],
            ["host link (pinned), GB/s", der.get("host_link_gbps")]]
    rows += [[f"MegatronTrainer {k}, TFLOP/s", v] for k, v in der.get("train_model_tflops", {}).items()]
    rows += [[f"CUDA-graph decode {k}: GB/s at batch 1 / TFLOP/s at batch 256",
              f"{_fmt(v.get('gbps_at_b1'))} / {_fmt(v.get('tflops_at_b256'))}"]
             for k, v in der.get("decode_kernels", {}).items()]
    rows += [[f"HF eager decode {k}: s per step (batch 0 intercept)", v.get("step_s_at_b0")]
             for k, v in der.get("hf_decode", {}).items()]
    out += _table(["measured", "value"], rows)
    checks = [[name, len(chk.get("points", [])), k, _apct(v)]
              for name, chk in d.get("model_check", {}).items()
              for k, v in chk.items() if k != "points" and isinstance(v, (int, float))]
    if checks:
        out += _table(["cost model against", "points", "statistic", "value"], checks)
    for sec, lst in (("matmul", d.get("matmul")), ("memory", d.get("memory")), ("host", d.get("host"))):
        if lst:
            out += _table([sec, "value", "unit"], [[x.get("what"), x.get("value"), x.get("unit")] for x in lst])
    return out


def _host_speed(d: dict) -> list[str]:
    rows = [[k, p.get("n"), p.get("min_s"), p.get("median_s"), p.get("p90_s"), _apct(p.get("slow_share")),
             p.get("slow_over_fast")] for k, p in d.get("probes", {}).items()]
    return ([f"A probe every {_fmt(d.get('every_s'))} s for {_fmt(d.get('seconds'))} s; a sample "
             f"{_fmt(d.get('slow_threshold'))}x the fastest or more counts as slow.", ""]
            + _table(["probe", "samples", "fastest s", "median s", "p90 s", "slow share", "slow / fast"], rows)
            + _host_tracking(d.get("train_tracking", {})))


def _host_tracking(t: dict) -> list[str]:
    """How the probe parts follow the train step (bench/host_speed.py `tracking`)."""
    if not t:
        return []
    labels = sorted({lab for v in t.values() for lab in v})
    rows = [[k] + [f"{_fmt(v[lab]['corr'])} / {_fmt(v[lab]['elasticity'])}" if lab in v else ""
                   for lab in labels] for k, v in t.items()]
    return (["How the train step follows each probe over the same seconds: correlation of log "
                 "times / the train step's elasticity on the probe (1: a ratio carries over as it "
                 "is; below 1: the probe over-reacts).", ""]
            + _table(["probe", *labels], rows))


def _learning_rows(label: str, r: dict) -> list[Any]:
    seeds = r.get("seeds", {})
    cells = [f"{_fmt(s.get('accuracy_from'))} → {_fmt(s.get('accuracy_to'))}" for s in seeds.values()]
    return [label, r.get("steps"), r.get("lr"), *cells,
            f"{_fmt(r.get('accuracy_from_mean'))} → {_fmt(r.get('accuracy_to_mean'))}"]


def _learning(d: dict) -> list[str]:
    seeds = list(d.get("seeds", {}))
    rows = [_learning_rows(f"{d.get('reward')} reward (GenRM agreement "
                           f"{_fmt(d.get('genrm_prep', {}).get('genrm_agreement'))} token by token)", d)]
    out = [f"`{d.get('config')}`, plan `{d.get('plan')}`, {d.get('samples_per_step')} samples per step; "
           f"accuracy = exact-checker accuracy, {d.get('from_to')}.", ""]
    out += _table(["reward", "steps", "lr", *[f"seed {s}" for s in seeds], "mean"], rows)
    ag = d.get("genrm_agreement", {})
    if ag:
        out += _table(["GenRM vs exact checker", "pairs", "agreement", "correct accepted", "wrong rejected"],
                      [[k, v.get("pairs"), v.get("agreement"), v.get("on_correct"), v.get("on_wrong")]
                       for k, v in ag.items()])
    return out


def _plan_speed(d: dict) -> list[str]:
    out = [f"{_fmt(d.get('gpus'))} GPUs, {_fmt(d.get('samples'))} samples per step: "
           f"{_fmt(d.get('seconds'))} s wall ({_fmt(d.get('cpu_seconds'))} s CPU in the main process), "
           f"{d.get('simulations')} simulations of {_fmt(d.get('candidates'))} candidates, target "
           f"{_fmt(d.get('target_seconds'))} s; best `{d.get('best')}` at {_fmt(d.get('best_step_s'))} s/step.", ""]
    rows = [[g, _apct(r.get("regret")), r.get("chosen"), r.get("simulations"), r.get("exhaustive_simulations")]
            for g, r in d.get("regret", {}).items()]
    out += _table(["GPUs", "regret", "chosen (= exhaustive optimum when regret is 0)",
                   "simulations", "exhaustive simulations"], rows)
    scale = d.get("scale")
    if scale:
        out += ["`yatt plan` end to end at scale (a fresh process, every output written; peak "
                "RSS of the process and its workers); regret against SimPy scans of the "
                "finalists' splits at full size:", ""]
        rows = []
        for g, r in scale.items():
            rg = r.get("regret") or {}
            rows.append([g, r.get("samples"), r.get("wall_seconds"), r.get("target_seconds"),
                         r.get("cpu_seconds"), r.get("peak_rss_mb"), r.get("search_cpu_seconds"),
                         r.get("outputs_cpu_seconds"), r.get("slice_simulations"),
                         r.get("fluid_evaluations"), r.get("best"), r.get("best_priced_by"),
                         _apct(rg.get("regret")) if rg else "-",
                         rg.get("reference_simulations") if rg else "-",
                         _apct(rg.get("slice_choice_regret")) if "slice_choice_regret" in rg else "-"])
        out += _table(["GPUs", "samples", "wall s", "target s", "CPU s", "peak MB", "search CPU s",
                       "outputs CPU s", "slice sims", "fluid evals (split)", "chosen", "priced by",
                       "regret", "reference sims", "slice's own choice"], rows)
    return out


def _sim_speed(d: dict) -> list[str]:
    rows = [[m, d.get(f"plan_{m}"), d.get(f"seconds_{m}"), d.get(f"cpu_seconds_{m}"),
             d.get(f"simulated_step_s_{m}")] for m in ("colocate", "partial")]
    return ([f"One simulated step of {_fmt(d.get('samples'))} samples on {d.get('gpus')} GPUs "
             f"({d.get('cost_model')}).", ""]
            + _table(["mode", "plan", "wall s", "CPU s", "simulated step s"], rows))


def _vs_trl(d: dict) -> list[str]:
    rows = []
    for r in (d, d.get("large")):
        if not r:
            continue
        job = f"{r.get('prompts_per_step')}×{r.get('samples_per_prompt')}, ≤{r.get('max_new_tokens')} tokens"
        y, t = r.get("yatt", {}), r.get("trl", {})
        rows.append([job, y.get("steady_step_s"), t.get("steady_step_s"), r.get("ratio"),
                     y.get("wall_s"), t.get("wall_s"), r.get("ratio_incl_startup")])
    out = _table(["job", "yatt s/step", "TRL s/step", "yatt/TRL throughput", "yatt wall s",
                  "TRL wall s", "ratio incl. start-up"], rows)
    phases = [[f"yatt {k}", v] for k, v in d.get("yatt", {}).get("phases_s", {}).items()]
    phases += [[f"TRL {k}", v] for k, v in d.get("trl", {}).get("phases_s", {}).items()]
    if phases:
        out += _table(["per step, small job", "s"], phases)
    out += [f"- {s}" for s in d.get("statements", [])] + [""]
    for key, title in (("genrm", "GenRM job"),
                       ("genrm_long", "GenRM long job (random-init actor, long-tailed responses)"),
                       ("genrm_large", "GenRM large job (random-init 7M actor, 10M GenRM, "
                                       "long-tailed responses)"),
                       ("genrm_large_256", "GenRM large job, 256-token budget")):
        g = d.get(key)
        if g:
            out += _genrm_job(g, title)
    return out


def _genrm_job(g: dict, title: str) -> list[str]:
    out = [f"{title} ({g.get('prompts_per_step')}×{g.get('samples_per_prompt')}, "
           f"≤{g.get('max_new_tokens')} tokens, {g.get('steps')} steps; two compute threads "
           "per side):", ""]
    acc = g.get("accuracy_first5_last5", {})
    rows = [[f"yatt {side.get('mode')} ({side.get('plan')})", side.get("steady_step_s"),
             side.get("predicted_step_s"), side.get("wall_s"),
             " → ".join(map(str, acc.get(f"yatt {side.get('mode')}", [])))]
            for side in (g.get("yatt", {}), g.get("yatt_forced", {})) if side]
    t = g.get("trl", {})
    rows.append(["TRL GRPOTrainer, GenRM via HF generate", t.get("steady_step_s"), "",
                 t.get("wall_s"), " → ".join(map(str, acc.get("trl", [])))])
    out += _table(["side", "s/step", "predicted s/step", "wall s",
                   "accuracy first 5 → last 5"], rows)
    out += [f"- {s}" for s in g.get("statements", [])] + [""]
    return out


def _quick_profile(d: dict) -> list[str]:
    alone = d.get("quick_alone") or {}
    out = [f"Quick profile (`yatt profile --quick`, Ray-path terms from `{d.get('quick_base')}`) "
           f"against the full one, both made here on {', '.join(d.get('configs', []))}. "
           f"Made twice: {_fmt(d.get('quick_wall_s'))} s for all of them "
           f"({_fmt(d.get('quick_wall_s_per_config'))} s per config); {_fmt(alone.get('wall_s'))} s "
           f"for `{alone.get('config')}` alone; the full one {_fmt(d.get('full_wall_s'))} s. "
           "Per phase: busy seconds per step of the full profile's best plan of each mode, "
           "simulated with each profile (phases over 0.05 s)"
           + ("; the quick ones rescaled to the full one's host probe, as `yatt plan|run` "
              "rescale a profile" if "phase_max_abs_diff_raw" in d else "")
           + ("; the full one with the quick ones' contention ratios (the base's, fitted to "
              "measured runs), so the two differ by their measured tables only"
              if "cases_raw" in d else "") + ".", ""]
    rows = [[r["experiment"], r["mode"], r["plan"], r["full_step_s"], r["quick_step_s"],
             _pct(r["step_diff"]), _apct(r.get("phase_max_abs_diff")),
             _pct(r2["step_diff"]), _apct(r2.get("phase_max_abs_diff"))]
            for r, r2 in zip(d.get("cases", []), d.get("cases_second_quick", []))]
    out += _table(["experiment", "mode", "plan", "full s/step", "quick s/step", "step diff",
                   "max phase diff", "step diff, 2nd quick", "max phase diff, 2nd quick"], rows)
    t = d.get("targets", {})
    out += _table(["summary", "value", "target", "met"], [
        ["per phase, median / max abs diff",
         f"{_apct(d.get('phase_median_abs_diff'))} / {_apct(d.get('phase_max_abs_diff'))}",
         f"max {_apct(t.get('phase_max_abs_diff'))}", _fmt(d.get("phase_target_met"))],
        ["step time, median / max abs diff",
         f"{_apct(d.get('step_median_abs_diff'))} / {_apct(d.get('step_max_abs_diff'))}", "-", "-"],
        *([["per phase as measured (no rescale; each profile's own contention), median / max abs diff",
            f"{_apct(d.get('phase_median_abs_diff_raw'))} / {_apct(d.get('phase_max_abs_diff_raw'))}",
            "-", "-"],
           ["host probe, Python / matmul part s (quick, full, 2nd quick)",
            "; ".join(f"{k} {a} / {b}" for k, (a, b) in d.get("host_probe_s", {}).items()),
            "-", "-"]] if "phase_max_abs_diff_raw" in d else []),
        ["quick wall s (all, all again, alone)",
         _fmt([*d.get("quick_wall_s", []), alone.get("wall_s")]),
         f"<= {_fmt(t.get('quick_wall_s'))} each", _fmt(d.get("wall_target_met"))]])
    return out


def _engine_cycle(d: dict) -> list[str]:
    out = [f"One CPU engine destroyed and re-created (`release: teardown`), medians of "
           f"{d.get('rounds')} interleaved rounds; KV cache sized by yatt: "
           + ", ".join(f"{k} {_fmt(v / 2**20)} MiB" for k, v in d.get("kv_bytes_yatt", {}).items())
           + f"; resident memory after the last round {d.get('rss_mb_after')} MB.", ""]
    rows = [[r["variant"], r["model"], r["create_s"], r["teardown_s"], r["cycle_s"],
             f"{_fmt(r['speedup'])}x", r["generate_s"]] for r in d.get("rows", [])]
    return out + _table(["variant", "model", "create s", "teardown s", "cycle s",
                         "vs vLLM defaults", "generate s (8 x 8 tokens)"], rows)


RENDERERS: dict[str, Callable[[dict], list[str]]] = {
    "checkpoint": _checkpoint, "snapshot": _snapshot, "controllers": _controllers, "engine_cycle": _engine_cycle,
    "faults": _faults, "fidelity": _fidelity,
    "genrm_stream": _genrm_stream, "gpu_h200": _gpu,
    "gpu_probe": _gpu, "host_speed": _host_speed, "learning": _learning,
    "plan_speed": _plan_speed, "quick_profile": _quick_profile, "sim_speed": _sim_speed,
    "vs_trl": _vs_trl,
}


def render(name: str, data: dict) -> str:
    """The generated `NAME.md` for a result."""
    m = data.get("_meta", {})
    lines = [f"# bench result: {name}", "",
             f"Generated from `{name}.json` by `python bench/_results.py`; do not edit.", "",
             f"- date: {m.get('date', '-')}", f"- host: {m.get('host', '-')}",
             f"- command: `{m.get('command', '-')}`", ""]
    try:
        # every fidelity run (fidelity-run2, fidelity-tp2, ...) has the fidelity bench's shape
        key = "fidelity" if name.startswith("fidelity") else name
        body = RENDERERS.get(key, _generic)(data)
    except (KeyError, TypeError, AttributeError, ValueError):  # a reshaped result: still a table
        body = _generic(data)
    return "\n".join(lines + body).rstrip() + "\n"


def stale() -> list[str]:
    """Result files whose .md is missing or differs from `render` of their .json."""
    bad = []
    for j in sorted(RESULTS.glob("*.json")):
        md = j.with_suffix(".md")
        want = render(j.stem, json.loads(j.read_text()))
        if not md.exists() or md.read_text() != want:
            bad.append(str(md.relative_to(RESULTS.parents[1])))
    return bad


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--check"]:
        bad = stale()
        for b in bad:
            print(f"stale: {b} (run: python bench/_results.py)", file=sys.stderr)
        return 1 if bad else 0
    for j in sorted(RESULTS.glob("*.json")):
        j.with_suffix(".md").write_text(render(j.stem, json.loads(j.read_text())))
        print(f"wrote {j.with_suffix('.md').relative_to(RESULTS.parents[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why is the streaming GenRM phase under-predicted in partial colocate? One engine, alone.

Why: in bench/fidelity.py's partial-colocate cases the GenRM span runs 34-67% above the
prediction, even calibrated. This replays one measured step's arrival pattern (the
rollout-end times of `short/partial`, step 3: 32 judgments of 27 prompt tokens and 4
output tokens, arriving in 10 groups over 0.118 s) into the real vLLM engine of the GenRM,
in-process, with nothing else running, and logs every engine step: when it ran, how long it
took, how many requests it admitted. It feeds the same arrivals to the simulator's engine
(`yatt.sim.engine.GenEngine`, the profiled cost model, no contention) and compares the two
end times, and each mixed step's extra cost (over the plain step after it) with the
profile's join table. With no Ray, queue or second engine involved, what is left is the
engine and its model.
Writes bench/results/genrm_stream.json and prints a summary.
Usage: .venv/bin/python bench/genrm_stream.py [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from _results import write_result  # noqa: E402  (bench/ holds the script: on sys.path)
OUT = ROOT / "bench" / "results" / "genrm_stream.json"
# (seconds after the phase start, judgments arriving): short/partial step 3, measured
ARRIVALS = [(0.026, 4), (0.045, 1), (0.061, 4), (0.069, 4), (0.078, 1), (0.087, 5),
            (0.098, 1), (0.110, 3), (0.113, 3), (0.118, 6)]
PROMPT, OUTPUT = 27, 4


def simulated_end(cost, spec, join: bool) -> float:
    """When the simulator's engine finishes the same arrivals (`join`: price requests that
    join a decoding batch with the join table, else with the idle-engine prefill)."""
    import simpy

    from yatt.sim.engine import GenEngine

    n = sum(k for _, k in ARRIVALS)
    inp, out = [PROMPT] * n, [OUTPUT] * n
    pf = [cost.prefill_time(spec, 1, PROMPT)] * n
    pj = [cost.prefill_join_time(spec, 1, PROMPT)] * n if join else None
    env = simpy.Environment()
    ends: list[float] = []
    eng = GenEngine(env, (0,), spec, 1, cost, 10 ** 6, 64, inp, out, pf,
                    lambda e, done, now: ends.extend([now] * len(done)), join_s=pj)

    def feed():
        i = 0
        for at, k in ARRIVALS:
            yield env.timeout(at - env.now)
            for _ in range(k):
                eng.submit(i)
                i += 1
        eng.close()

    env.process(feed())
    env.run()
    return max(ends)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    import numpy as np

    from yatt.core.config import load_experiment
    from yatt.profiling import microbench as mb
    from yatt.exec.rollout import EngineCore
    from yatt.planner.profile_io import load_profile
    from yatt.planner.profiled import cost_model_for

    mb.prepare("cpu")
    exp = load_experiment(ROOT / "configs" / "fidelity" / "short.yaml")
    spec = exp.genrm
    core = EngineCore(mb._engine_config(str(mb.model_path(spec)), True, 64, 0.5))
    core.start()
    rng = np.random.default_rng(0)
    mb._add(core, "warm", mb._ids(16, spec.vocab, rng), OUTPUT)
    mb._drain(core)
    cost = cost_model_for(exp, load_profile(ROOT / "configs" / "profiles" / "cpu-local.yaml"))
    runs = []
    for rep in range(a.reps):
        pending, n, steps = list(ARRIVALS), 0, []
        t0 = time.perf_counter()
        while pending or core.has_unfinished():
            now = time.perf_counter() - t0
            new = 0
            while pending and pending[0][0] <= now:
                for _ in range(pending.pop(0)[1]):
                    mb._add(core, f"r{rep}-{n}", mb._ids(PROMPT, spec.vocab, rng), OUTPUT)
                    n, new = n + 1, new + 1
            if not core.has_unfinished():
                time.sleep(0.0005)
                continue
            running = core.engine.get_num_unfinished_requests()
            s = time.perf_counter()
            core.engine.step()
            steps.append({"at_s": now, "step_s": time.perf_counter() - s, "admitted": new,
                          "running": running})
        runs.append({"end_s": time.perf_counter() - t0, "steps": steps})
    core.stop()
    plain = [s for r in runs for s in r["steps"] if s["admitted"] == 0]
    # extra seconds per admitted request of a mixed step, over the plain step right after it
    extra = [(a["step_s"] - b["step_s"]) / a["admitted"] for r in runs
             for a, b in zip(r["steps"], r["steps"][1:]) if a["admitted"] and not b["admitted"]]
    res = {
        "arrivals": ARRIVALS, "prompt_tokens": PROMPT, "output_tokens": OUTPUT,
        "end_s": [r["end_s"] for r in runs],
        "steps_per_run": [len(r["steps"]) for r in runs],
        "plain_step_s_median": statistics.median(s["step_s"] for s in plain),
        "profile_plain_step_s": cost.decode_step_time(spec, 1, 8, PROMPT),
        "mixed_extra_s_per_request_median": statistics.median(extra) if extra else None,
        "profile_prefill_s_per_request": cost.prefill_time(spec, 1, PROMPT),
        "profile_join_s_per_request": cost.prefill_join_time(spec, 1, PROMPT),
        "simulated_end_s": simulated_end(cost, spec, join=True),
        "simulated_end_s_without_join": simulated_end(cost, spec, join=False),
        "runs": runs,
    }
    write_result(OUT, res)
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

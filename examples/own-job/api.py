"""The same job from Python: your model directory, a list of prompts, a reward callable.

    python examples/own-job/make_models.py     # once: the example's small models
    python examples/own-job/api.py --steps 2 --out out/own-job-api

It goes through the same planner and executor as `yatt run` (yatt.api.Trainer).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from yatt import Trainer

HERE = Path(__file__).resolve().parent


def first_number_is_answer(prompt, response, answer, **row):
    """The rule reward: 1.0 when the response's first number is the answer."""
    m = re.search(r"-?\d+", response)
    return float(m is not None and m.group(0) == str(answer))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default="out/own-job-api")
    ap.add_argument("--models", default=str(HERE / "models"))
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in (HERE / "data" / "train.jsonl").read_text().splitlines()]
    trainer = Trainer(actor_model=f"{args.models}/actor", reward_fn=first_number_is_answer,
                      dataset=rows, prompt_key="question", answer_key="answer",
                      strategy="colocate", samples_per_prompt=4, max_new_tokens=12,
                      out_dir=args.out)
    trace = trainer.train(batch_size=4, steps=args.steps, progress=False)
    rewards = [s.reward for s in trace.samples]
    print(f"{len(trace.samples)} samples, mean reward {sum(rewards) / len(rewards):.3f}; "
          f"run dir {args.out}")


if __name__ == "__main__":
    main()

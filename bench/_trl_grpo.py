"""TRL's side of bench/vs_trl.py: one GRPOTrainer run, run by the TRL venv's python.

    /tmp/yatt-trl-venv/bin/python bench/_trl_grpo.py '<json config>'

Why a separate file: TRL lives in its own venv (it pins its own transformers), so this
script runs there and imports from yatt only the pure judging pieces (`yatt.core.jobspec`,
`yatt.exec.genrm`: the template, chat wrapping and verdict parser yatt's GenRM uses), never
the executor. Prints one line `RESULT {json}` with the step-end clock, start-up, the time
in HF `generate` (actor) and in the GenRM reward, and per-step reward and exact accuracy.
"""
import json
import re
import sys
import time

t_start = time.perf_counter()
import torch  # noqa: E402

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg.get("threads", 1))
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

FIRST_INT = re.compile(r"-?\d+")


def exact(completions, answer, **kw):   # yatt.exec.task.exact_match, inlined
    out = []
    for c, a in zip(completions, answer):
        m = FIRST_INT.search(c)
        out.append(1.0 if m is not None and m.group(0) == a.strip() else 0.0)
    return out


accuracy: list[float] = []
judge_s: list[float] = []


def genrm_reward(g: dict):
    """A reward function that judges every completion of a step with the GenRM through HF
    `generate` in one left-padded batch: yatt's template, chat wrapping, prompt cap, token
    budget, stop ids and parser, greedy like yatt's judge (temperature 0)."""
    sys.path.insert(0, g["root"])
    from yatt.core.jobspec import ChatTemplate, JudgeSpec, VerdictParser
    from yatt.exec.genrm import judge_ids, make_parser

    spec = JudgeSpec(**dict(g["spec"], chat_template=ChatTemplate(g["spec"]["chat_template"]),
                            parser=VerdictParser(g["spec"]["parser"])))
    tok = AutoTokenizer.from_pretrained(g["path"])
    model = AutoModelForCausalLM.from_pretrained(g["path"], dtype=torch.float32).eval()
    chat = (getattr(tok, "chat_template", None) or None
            if spec.chat_template is ChatTemplate.AUTO else None)
    parser = make_parser(spec)
    stop = set(g["stop"])
    pad = tok.pad_token_id if tok.pad_token_id is not None else g["stop"][0]
    cap, budget = g["prompt_cap"], g["max_tokens"]

    def judge(prompts, completions, answer, **kw):
        t = time.perf_counter()
        seqs = [judge_ids(tok, spec.template, chat, p.removeprefix(g["bos_text"]), c, a)[-cap:]
                for p, c, a in zip(prompts, completions, answer)]
        width = max(len(s) for s in seqs)
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=budget,
                                 do_sample=False, eos_token_id=sorted(stop), pad_token_id=pad)
        rewards = []
        for row in out[:, width:].tolist():
            cut = next((i for i, x in enumerate(row) if x in stop), len(row))
            text = tok.decode(row[:cut], skip_special_tokens=True)
            rewards.append(parser.parse(text).reward)
        hits = exact(completions, answer)
        accuracy.append(sum(hits) / len(hits))
        judge_s.append(time.perf_counter() - t)
        return rewards

    return judge


def rule(completions, answer, **kw):
    hits = exact(completions, answer)
    accuracy.append(sum(hits) / len(hits))
    return hits


reward = genrm_reward(cfg["genrm"]) if cfg.get("genrm") else rule
ds = Dataset.from_list(cfg["rows"])
tok = AutoTokenizer.from_pretrained(cfg["model"])
model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
gen_s = []
_generate = model.generate


def timed_generate(*a, **k):            # TRL's rollout time (HF generate), per call
    t = time.perf_counter()
    try:
        return _generate(*a, **k)
    finally:
        gen_s.append(time.perf_counter() - t)


model.generate = timed_generate


class Clock(TrainerCallback):
    def __init__(self):
        self.t = []

    def on_step_end(self, args, state, control, **kw):
        self.t.append(time.perf_counter())


clock = Clock()
vllm = dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.5,
            vllm_enable_sleep_mode=False) if cfg.get("use_vllm") else dict(use_vllm=False)
args = GRPOConfig(output_dir=cfg["out"], use_cpu=True, bf16=False, **vllm,
                  gradient_checkpointing=False, per_device_train_batch_size=cfg["batch"],
                  num_generations=cfg["group"], generation_batch_size=cfg["batch"],
                  max_completion_length=cfg["max_new"], max_steps=cfg["steps"],
                  learning_rate=cfg["lr"], lr_scheduler_type="constant", warmup_steps=0,
                  beta=cfg["beta"], temperature=1.0,
                  logging_steps=1, report_to=[], save_strategy="no", seed=0,
                  dataloader_num_workers=0, shuffle_dataset=False)
tr = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                 processing_class=tok, callbacks=[clock])
t_train = time.perf_counter()
tr.train()
logs = [h for h in tr.state.log_history if "completions/mean_length" in h]
print("RESULT " + json.dumps({"step_end": [t - t_train for t in clock.t],
      "startup_s": t_train - t_start, "total_s": time.perf_counter() - t_start,
      "generate_s": gen_s, "judge_s": judge_s, "accuracy": accuracy,
      "threads": torch.get_num_threads(),
      "mean_len": [h["completions/mean_length"] for h in logs],
      "reward": [h.get("reward", 0.0) for h in logs]}))

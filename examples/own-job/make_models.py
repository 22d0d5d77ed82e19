"""Make this example's two models: a small Qwen2-architecture policy and judge, each with
its own byte-level BPE tokenizer (trained here with `tokenizers` on the example's prompts)
and a ChatML chat template, saved as ordinary Hugging Face directories.

Why: the example must run offline on a fresh clone, through the same loading path a real
model takes (config.json, safetensors, tokenizer files, generation_config.json). The
weights are a seeded random init: the run shows the machinery (data, reward, judge,
eval, export), not learning (the learning demo is `configs/demo-learn.yaml`).

    python examples/own-job/make_models.py            # writes examples/own-job/models/
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def corpus() -> list[str]:
    """Text to train the tokenizer on: the example's prompts and answers, and judge words."""
    out = ["yes no correct wrong Question Reference Response answer"]
    for name in ("train.jsonl", "eval.jsonl"):
        for line in (HERE / "data" / name).read_text().splitlines():
            row = json.loads(line)
            q = row["question"]
            out.append(q if isinstance(q, str) else " ".join(m["content"] for m in q))
            out.append(str(row["answer"]))
    out.append((HERE / "judge.txt").read_text())
    return out


def make_tokenizer(out: Path, vocab_size: int = 384):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=CHATML)
    fast.save_pretrained(str(out))
    return fast


def make_model(out: Path, seed: int, layers: int = 2, hidden: int = 64) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tok = make_tokenizer(out)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    vocab = -(-len(tok) // 64) * 64          # padded, as real checkpoints pad theirs
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=32, max_position_embeddings=1024, tie_word_embeddings=True,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      bos_token_id=None, eos_token_id=eos, pad_token_id=pad,
                      use_sliding_window=False, dtype="float32")
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad,
                                               bos_token_id=None)
    model.save_pretrained(str(out), safe_serialization=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "models"), help="where actor/ and judge/ go")
    args = ap.parse_args()
    out = Path(args.out)
    for name, seed in (("actor", 0), ("judge", 1)):
        make_model(out / name, seed)
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main()

"""Chat SFT with the Hugging Face ``Trainer`` fed by youmu: the whole script.

    torchrun --nproc-per-node 8 examples/sft_trainer.py --data ultrachat/

A published model's tokenizer and its own chat template (``ChatTemplate``: labels -100
except on the assistant's tokens, cut to ``cutoff_len`` turn by turn as LLaMA-Factory
cuts), templating and tokenizing in 2 DataLoader workers per rank, online dynamic batches
of ``token_budget`` tokens, a checkpoint every ``save_steps`` that holds each rank's loader
state, and a resume from the latest checkpoint after a preemption: run it again and every
chat left is trained exactly once. The defaults are a real job's; the documentation's test
runs it on one process with a tiny local model (``--model my-model --max-steps 4
--save-steps 2``), twice.
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct",
                   help="a Hub id or model directory: its tokenizer and chat template as published")
    p.add_argument("--data", default="ultrachat/", help="Parquet of chats (a `messages` column), a path or URL")
    p.add_argument("--out", default="sft-out")
    p.add_argument("--max-steps", type=int, default=20_000)
    p.add_argument("--save-steps", type=int, default=500)
    p.add_argument("--token-budget", type=int, default=16384)
    p.add_argument("--cutoff-len", type=int, default=8192)
    a = p.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    from youmu.batching import DynamicBatchLoader, label_token_count
    from youmu.integrations import TrainerLoader
    from youmu.integrations.hf import make_trainer
    from youmu.text import ChatTemplate
    from youmu.torch import YoumuDataset, lm_collate

    # first: under torchrun the arguments start the process group the data shards over
    args = TrainingArguments(a.out, per_device_train_batch_size=1, max_steps=a.max_steps, save_steps=a.save_steps,
                             report_to="none")
    # the tokenizer's own chat template (transformers' apply_chat_template), labels -100
    # except on the assistant's tokens, cut to cutoff_len turn by turn as LLaMA-Factory cuts
    tok = AutoTokenizer.from_pretrained(a.model)              # a fast tokenizer with a chat template
    ds = YoumuDataset(a.data, columns=["messages"], transform=ChatTemplate(tok, cutoff_len=a.cutoff_len))
    loader = DynamicBatchLoader(ds, token_budget=a.token_budget, length_fn=lambda s: len(s["input_ids"]),
                                token_count_fn=label_token_count(), collate_fn=lm_collate,
                                num_workers=2,      # templating and tokenizing run in the DataLoader workers
                                uneven="pad")       # the Trainer has no DDP Join: every rank takes the same steps
    model = AutoModelForCausalLM.from_pretrained(a.model)
    trainer = make_trainer()(model=model, args=args, train_loader=TrainerLoader(loader))
    # after a preemption: the latest checkpoint-N/, and every chat left trained exactly once
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)
    print(f"global step {trainer.state.global_step}, resumed from {last}")


if __name__ == "__main__":
    main()

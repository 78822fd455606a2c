"""A Hugging Face ``Trainer`` run as most users write it: a tiny BERT classifier built from a
config (random weights, no download), a synthetic dataset, ``Trainer.train()`` with an
evaluation every few steps.

Run: ``advisor profile examples/frameworks/hf_trainer.py`` (``--workers 2`` for DataLoader
workers, ``--steps N``). Needs ``pip install transformers accelerate``; CPU or GPU.
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

SEQ, VOCAB = 32, 512


class Sentences(Dataset):
    """Synthetic token ids with a label that depends on them (something to learn)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, VOCAB, (n, SEQ), generator=g)
        self.labels = (self.ids[:, 0] > VOCAB // 2).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(SEQ, dtype=torch.long),
            "labels": self.labels[i],
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=SEQ,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=16,
            per_device_eval_batch_size=16,
            learning_rate=1e-3,
            eval_strategy="steps",
            eval_steps=max(args.steps // 2, 1),
            logging_steps=5,
            save_strategy="no",
            report_to=[],
            dataloader_num_workers=args.workers,
            disable_tqdm=True,
            use_cpu=not torch.cuda.is_available(),
        )
        trainer = Trainer(
            model=model,
            args=training_args,
            train_dataset=Sentences(16 * 64, seed=1),
            eval_dataset=Sentences(16 * 8, seed=2),
        )
        trainer.train()


if __name__ == "__main__":
    main()

"""A PyTorch Lightning run as most users write it: a ``LightningModule`` that logs its loss
with ``self.log(..., prog_bar=True)``, a validation loop, ``Trainer.fit()`` (with Lightning's
default sanity check: 2 validation batches before training).

Run: ``advisor profile examples/frameworks/lightning_train.py`` (``--workers 2`` for DataLoader
workers, ``--steps N``). Needs ``pip install lightning`` (or ``pytorch-lightning``); CPU or GPU.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning as L
except ImportError:  # the older package name
    import pytorch_lightning as L  # type: ignore[no-redef]


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    persistent = args.workers > 0
    train_loader = DataLoader(
        dataset(32 * 64, 1),
        batch_size=32,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=persistent,
    )
    val_loader = DataLoader(
        dataset(32 * 8, 2), batch_size=32, num_workers=args.workers, persistent_workers=persistent
    )
    trainer = L.Trainer(
        max_steps=args.steps,
        val_check_interval=max(args.steps // 2, 1),
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier(), train_loader, val_loader)


if __name__ == "__main__":
    main()

"""A training loop wrapped with Hugging Face ``accelerate``: model, optimizer and both
DataLoaders through ``accelerator.prepare(...)``, ``accelerator.backward(loss)``, an
evaluation pass after training.

Run: ``advisor profile examples/frameworks/accelerate_loop.py`` (``--workers 2`` for DataLoader
workers, ``--steps N``), or ``accelerate launch --no_python advisor profile ...``. Needs
``pip install accelerate``; CPU or GPU.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    accelerator = Accelerator()
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_loader = DataLoader(
        dataset(32 * 64, 1), batch_size=32, shuffle=True, num_workers=args.workers
    )
    eval_loader = DataLoader(dataset(32 * 8, 2), batch_size=32, num_workers=args.workers)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )
    model.train()
    step = 0
    while step < args.steps:
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == args.steps:
                break
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in eval_loader:
            pred = model(x).argmax(1)
            correct += int(accelerator.gather_for_metrics((pred == y).sum()))
            total += len(y)
    accelerator.print(f"eval accuracy {correct / max(total, 1):.3f}")


if __name__ == "__main__":
    main()

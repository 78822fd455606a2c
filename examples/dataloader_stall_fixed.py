"""dataloader-stall, fixed: worker processes prepare the next batches while the model trains
(num_workers, persistent_workers, prefetch_factor), and batches land in pinned memory.

Problem twin: dataloader_stall.py. Run: advisor profile examples/dataloader_stall_fixed.py
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset):
    """Synthetic 3x32x32 images; each sample costs ~1 ms of CPU work, like JPEG decoding."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        acc = 0
        for k in range(8_000):  # ~1 ms of pure-Python work (no calls: a small trace)
            acc += k * k
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), i % 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)  # ~4 per GPU is a common start
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(3 * 32 * 32, 256), nn.ReLU(), nn.Linear(256, 10)
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(
        SlowImages(),
        batch_size=16,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=True,
        prefetch_factor=4,
        pin_memory=device == "cuda",
    )
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

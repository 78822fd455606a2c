"""memory-headroom (info): a conv net trained with batch 4 uses a sliver of the GPU's
memory. Nothing is slow as such, so advisor estimates no saving (the finding is info-level),
but a larger batch would amortize per-step overheads and give the kernels more work.

Fixed twin: memory_headroom_fixed.py. Run: advisor profile examples/memory_headroom.py
"""

import argparse

import torch
import torch.nn as nn


def make_model(device: str) -> nn.Module:
    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(3, 16), *block(16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)
    ).to(device)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = make_model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = 4  # most of the device memory stays unused
    for _ in range(args.steps):
        x = torch.randn(batch, 3, 64, 64, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""python-loop, fixed: the same loss on the whole batch at once (a handful of ops per step).

Problem twin: python_loop.py. Run: advisor profile examples/python_loop_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def smooth_l1(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # same value as the loop: mean over samples of the per-sample sum
    return nn.functional.smooth_l1_loss(pred, target, reduction="sum") / pred.shape[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        x, y = torch.randn(128, 32, device=device), torch.randn(128, 4, device=device)
        loss = smooth_l1(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""python-loop: a per-sample loss computed in a Python loop. Each iteration indexes the batch
(select), computes on one row and accumulates: hundreds of tiny ops per step, all driven by the
interpreter.

Fixed twin: python_loop_fixed.py. Run: advisor profile examples/python_loop.py
"""

import argparse

import torch
import torch.nn as nn


def smooth_l1_per_sample(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    total = torch.zeros((), device=pred.device)
    for i in range(pred.shape[0]):  # one Python iteration per sample
        diff = (pred[i] - target[i]).abs()
        total = total + torch.where(diff < 1, 0.5 * diff**2, diff - 0.5).sum()
    return total / pred.shape[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, 32, device=device), torch.randn(args.batch, 4, device=device)
        loss = smooth_l1_per_sample(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""sync-point: the host waits for the GPU every step. ``loss.item()`` for logging, a
data-dependent Python branch on a tensor, and ``nonzero()`` each copy a value back and block
until all queued GPU work is done, so the CPU cannot run ahead and queue the next step.

Fixed twin: sync_point_fixed.py. Run: advisor profile examples/sync_point.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    history = []
    for step in range(args.steps):
        x = torch.randn(256, 512, device=device)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if loss > 10:  # data-dependent branch: a hidden .item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        history.append(loss.item())  # blocks until the step has finished on the GPU
        big = (x.abs() > 3).nonzero()  # output size depends on the data: a sync
        print(f"step {step} loss {history[-1]:.4f} outliers {len(big)}")


if __name__ == "__main__":
    main()

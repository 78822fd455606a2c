"""sync-point, fixed: values stay on the device; the host reads them every ``--log-every``
steps, in one copy. Clipping runs unconditionally (clip_grad_norm_ is cheap and sync-free).

Problem twin: sync_point.py. Run: advisor profile examples/sync_point_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses, outliers = [], []
    for step in range(args.steps):
        x = torch.randn(256, 512, device=device)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())  # stays on the device
        outliers.append((x.abs() > 3).sum())  # a count, not nonzero(): no sync
        if (step + 1) % args.log_every == 0:
            vals = torch.stack(losses).tolist()  # one sync per log interval
            print(f"step {step} loss {vals[-1]:.4f} outliers {int(torch.stack(outliers)[-1])}")
            losses, outliers = [], []


if __name__ == "__main__":
    main()

"""single-tensor-optimizer, fixed: ``fused=True`` on a GPU (the whole Adam step in one
kernel per group of tensors) and ``foreach=True`` on the CPU (multi-tensor ``_foreach_*``
ops over all 72 parameters at once).

Problem twin: single_tensor_optimizer.py. Run:
advisor profile examples/single_tensor_optimizer_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    layers = [m for _ in range(24) for m in (nn.Linear(128, 128), nn.LayerNorm(128), nn.ReLU())]
    model = nn.Sequential(*layers).to(device)
    if device == "cuda":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
    for _ in range(args.steps):
        x = torch.randn(64, 128, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

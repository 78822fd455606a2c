"""zero-grad-not-none, fixed: ``zero_grad()`` (``set_to_none=True``, the default since PyTorch
2.0) drops the gradients; the backward allocates and writes them fresh.

Problem twin: zero_grad.py. Run: advisor profile examples/zero_grad_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    layers = [m for _ in range(12) for m in (nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU())]
    model = nn.Sequential(*layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        x = torch.randn(64, 256, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()  # set_to_none=True
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

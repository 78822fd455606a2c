"""zero-grad-not-none: ``zero_grad(set_to_none=False)`` fills every gradient with zeros each
step (one memset/fill per parameter), and the backward then adds into them instead of writing.

Fixed twin: zero_grad_fixed.py. Run: advisor profile examples/zero_grad.py
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
        opt.zero_grad(set_to_none=False)  # memsets every .grad
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""cat-in-loop, fixed: collect the pieces in a list and concatenate once (or, when the sizes
are known, preallocate and fill slices).

Problem twin: cat_in_loop.py. Run: advisor profile examples/cat_in_loop_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128)).to(device)
    head = nn.Linear(128, 1).to(device)
    opt = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=1e-3)
    for _ in range(args.steps):
        xs = [torch.randn(16, 64, device=device) for _ in range(64)]
        feats = encoder(torch.cat(xs))  # one cat, one batched forward
        loss = head(feats).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

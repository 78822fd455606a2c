"""cat-in-loop: features of every micro-batch are appended to one tensor with ``torch.cat``.
Each cat copies everything gathered so far: quadratic copying, one new allocation per call.

Fixed twin: cat_in_loop_fixed.py. Run: advisor profile examples/cat_in_loop.py
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
        feats = torch.empty(0, 128, device=device)
        for _ in range(64):  # micro-batches of one step
            x = torch.randn(16, 64, device=device)
            feats = torch.cat([feats, encoder(x)])  # grows by copying the whole tensor
        loss = head(feats).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

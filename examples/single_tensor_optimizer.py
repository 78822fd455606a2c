"""single-tensor-optimizer: a 24-layer MLP (72 parameter tensors) trained with
``Adam(foreach=False)``: the step runs several small ops per parameter, one kernel launch
each on a GPU, so the GPU idles while the host walks the parameter list.

Fixed twin: single_tensor_optimizer_fixed.py. Run:
advisor profile examples/single_tensor_optimizer.py
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
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)  # one op per tensor
    for _ in range(args.steps):
        x = torch.randn(64, 128, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""data-parallel: the model is wrapped in ``nn.DataParallel``. Every step it broadcasts all
parameters from GPU 0 to the other GPUs, scatters the batch, runs the replicas in Python
threads and gathers the outputs (and the gradients) back on GPU 0. Without GPUs the wrapper
just calls the module, so the script still runs on a CPU.

Fixed twin: data_parallel_fixed.py. Run: advisor profile examples/data_parallel.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    layers = [m for _ in range(6) for m in (nn.Linear(512, 512), nn.LayerNorm(512), nn.GELU())]
    model = nn.DataParallel(nn.Sequential(*layers, nn.Linear(512, 10)).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        x = torch.randn(128, 512, device=device)
        y = torch.randint(0, 10, (128,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)  # broadcast, scatter, gather
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

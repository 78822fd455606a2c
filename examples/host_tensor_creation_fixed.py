"""host-tensor-creation, fixed: ``torch.arange(..., device=device)`` and
``torch.randn(..., device=device)`` create the tensors where they are used: one fast kernel
each, no host work and no copy. (The position ids never change: hoisting them out of the loop
would do as well. Noise drawn on the GPU uses the GPU's random stream: other values, same
distribution.)

Problem twin: host_tensor_creation.py. Run: advisor profile examples/host_tensor_creation_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch, seq, dim = 32, 128, 256
    tok, pos = nn.Embedding(1000, dim).to(device), nn.Embedding(seq, dim).to(device)
    mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, 1000)).to(device)
    params = [*tok.parameters(), *pos.parameters(), *mlp.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    for _ in range(args.steps):
        ids = torch.randint(0, 1000, (batch, seq), device=device)
        positions = torch.arange(seq, device=device)  # created on the device
        noise = torch.randn(batch, seq, dim, device=device)  # device RNG, no copy
        h = tok(ids) + pos(positions) + 0.01 * noise
        loss = nn.functional.cross_entropy(mlp(h).flatten(0, 1), ids.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""host-tensor-creation: position ids and noise are built on the CPU with ``torch.arange`` /
``torch.randn`` and copied to the device every step: the host draws 1M random numbers, then
the data crosses PCIe (from pageable memory) before the GPU can use it.

Fixed twin: host_tensor_creation_fixed.py. Run: advisor profile examples/host_tensor_creation.py
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
        positions = torch.arange(seq).to(device)  # built on the host, then copied
        noise = torch.randn(batch, seq, dim).to(device)  # host RNG + a 4 MB copy
        h = tok(ids) + pos(positions) + 0.01 * noise
        loss = nn.functional.cross_entropy(mlp(h).flatten(0, 1), ids.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

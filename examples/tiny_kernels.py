"""tiny-kernels: a multi-head block that projects each head with its own small Linear in a
Python loop. Every op is a tiny kernel whose launch costs more than its work: the GPU idles
between launches (launch-bound).

Fixed twin: tiny_kernels_fixed.py. Run: advisor profile examples/tiny_kernels.py
"""

import argparse

import torch
import torch.nn as nn


class PerHeadProjection(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 16) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(dim, dim // heads) for _ in range(heads))
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.relu(h(x)) * 0.5 + 0.1 for h in self.heads]  # 4 tiny kernels per head
        return self.out(torch.cat(parts, dim=-1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(*[PerHeadProjection() for _ in range(4)]).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    for _ in range(args.steps):
        x = torch.randn(8, 64, device=device)  # a batch far too small to fill a GPU
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

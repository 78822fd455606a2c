"""tiny-kernels, fixed: one Linear projects all heads at once (one matmul instead of 16), the
elementwise tail runs once on the whole tensor, the batch is larger, and the optimizer uses
multi-tensor kernels. On a GPU, torch.compile(model) or CUDA graphs fuse what is left.

Problem twin: tiny_kernels.py. Run: advisor profile examples/tiny_kernels_fixed.py
"""

import argparse

import torch
import torch.nn as nn


class FusedProjection(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.heads = nn.Linear(dim, dim)  # all heads in one weight
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.heads(x)) * 0.5 + 0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(*[FusedProjection() for _ in range(4)]).to(device)
    if device == "cuda":
        model = torch.compile(model)  # fuses the elementwise tail into the matmul epilogue
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    for _ in range(args.steps):
        x = torch.randn(256, 64, device=device)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""fusible-elementwise, fixed: on a GPU the bias + GELU + dropout + residual function is
``torch.compile``d, and Inductor turns the chain into one generated kernel (forward and
backward). On the CPU the twin skips the compiler (it needs a C++ toolchain and takes longer
to compile than this script runs) and uses the fused builtin ``F.gelu(approximate="tanh")``
instead of the hand-written formula: fewer, larger ops.

Problem twin: fusible_elementwise.py. Run: advisor profile examples/fusible_elementwise_fixed.py
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def bias_gelu_dropout_residual(
    x: torch.Tensor, h: torch.Tensor, bias: torch.Tensor, training: bool
) -> torch.Tensor:
    return x + F.dropout(F.gelu(h + bias, approximate="tanh"), 0.1, training)


FUSED = torch.compile(bias_gelu_dropout_residual) if torch.cuda.is_available() else None


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fn = FUSED or bias_gelu_dropout_residual
        return fn(x, self.proj(x), self.bias, self.training)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(*[Block(512) for _ in range(4)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        x = torch.randn(256, 512, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

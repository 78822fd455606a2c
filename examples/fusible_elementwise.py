"""fusible-elementwise: a hand-written bias + tanh-GELU + dropout + residual chain after each
``Linear``: about ten eager elementwise kernels in a row, each reading and writing the whole
activation from GPU memory, where one fused kernel would read it once.

Fixed twin: fusible_elementwise_fixed.py. Run: advisor profile examples/fusible_elementwise.py
"""

import argparse

import torch
import torch.nn as nn


def bias_gelu_dropout_residual(
    x: torch.Tensor, h: torch.Tensor, bias: torch.Tensor, training: bool
) -> torch.Tensor:
    h = h + bias
    h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    h = nn.functional.dropout(h, 0.1, training)
    return x + h


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bias_gelu_dropout_residual(x, self.proj(x), self.bias, self.training)


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

"""compile-recompiles, fixed: ``dynamic=False`` is dropped and the sequence length is marked
dynamic on each input (``torch._dynamo.mark_dynamic(x, 1)``), so one compilation serves every
length.

Compiled with ``backend="eager"`` on the CPU and with inductor on a GPU.

Problem twin: compile_recompile.py. Run: advisor profile examples/compile_recompile_fixed.py
"""

import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.proj(x))
        return self.head(h.mean(dim=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = "inductor" if device == "cuda" else "eager"
    model = torch.compile(Net(64).to(device), backend=backend)  # dynamic=False dropped
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        seq = 16 + step % 12
        x = torch.randn(32, seq, 64, device=device)
        torch._dynamo.mark_dynamic(x, 1)  # any length: one dynamic graph, no recompilation
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

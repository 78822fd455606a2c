"""compile-recompiles: a compiled model fed a new sequence length every step with
``dynamic=False``: each new shape fails the compiled graph's size guard and compiles the model
again, inside the training loop, until dynamo's recompile limit (8) sends it back to eager.

Compiled with ``backend="eager"`` on the CPU (inductor's C++ compile takes minutes on a small
machine; dynamo's guards and recompilations are the same) and with inductor on a GPU.

Fixed twin: compile_recompile_fixed.py. Run: advisor profile examples/compile_recompile.py
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
    model = torch.compile(Net(64).to(device), backend=backend, dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        seq = 16 + step % 12  # a new length each step: the size guard fails, it recompiles
        x = torch.randn(32, seq, 64, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

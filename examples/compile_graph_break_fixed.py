"""compile-graph-breaks, fixed: the norm clamp is written with tensor ops
(``h * clamp(limit / h.norm(), max=1)``), so the whole forward is one compiled graph.

Compiled with ``backend="aot_eager"`` on the CPU and with inductor on a GPU.

Problem twin: compile_graph_break.py. Run: advisor profile examples/compile_graph_break_fixed.py
"""

import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        h = h * torch.clamp(100.0 / h.norm(), max=1.0)  # no branch: one graph
        return self.head(h)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = "inductor" if device == "cuda" else "aot_eager"
    model = torch.compile(Net(128).to(device), backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(64, 128, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

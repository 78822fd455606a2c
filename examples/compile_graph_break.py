"""compile-graph-breaks: a compiled model whose forward branches on a tensor's value
(``if h.norm() > limit``): dynamo cannot trace the branch, so every call runs two compiled
graphs with a return to Python (and a guard check) in between.

Compiled with ``backend="aot_eager"`` on the CPU (inductor's C++ compile takes minutes on a
small machine; dynamo's graph breaks are the same) and with inductor on a GPU.

Fixed twin: compile_graph_break_fixed.py. Run: advisor profile examples/compile_graph_break.py
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
        if h.norm() > 100.0:  # data-dependent branch: a graph break on every call
            h = h * (100.0 / h.norm())
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

"""cudnn-benchmark: a conv net whose input shapes never change, run with
``torch.backends.cudnn.benchmark = False``: cuDNN picks each convolution's algorithm by
heuristics instead of timing the candidates once and keeping the fastest.

Fixed twin: cudnn_benchmark_fixed.py. Run: advisor profile examples/cudnn_benchmark.py
"""

import argparse

import torch
import torch.nn as nn


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = False  # heuristic algorithm choice
    model = nn.Sequential(
        block(3, 32),
        block(32, 64),
        nn.MaxPool2d(2),
        block(64, 64),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(args.steps):
        x = torch.randn(32, 3, 32, 32, device=device)  # the same shape every step
        y = torch.randint(0, 10, (32,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

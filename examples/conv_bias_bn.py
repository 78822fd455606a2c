"""conv-bias-before-bn: convolutions with ``bias=True`` directly followed by BatchNorm. The
BatchNorm subtracts the per-channel mean, so the bias is computed, stored and trained for
nothing (an extra add kernel per conv, forward and backward).

Fixed twin: conv_bias_bn_fixed.py. Run: advisor profile examples/conv_bias_bn.py
"""

import argparse

import torch
import torch.nn as nn


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(
        block(3, 16),
        block(16, 32),
        nn.MaxPool2d(2),
        block(32, 32),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(args.steps):
        x, y = torch.randn(16, 3, 32, 32, device=device), torch.randint(0, 10, (16,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

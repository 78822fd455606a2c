"""conv-bias-before-bn, fixed: ``bias=False`` on every convolution that feeds a BatchNorm
(the BatchNorm's own shift does the bias's job). Also a channels_last conv net and
cudnn.benchmark for its static shapes on a GPU.

Problem twin: conv_bias_bn.py. Run: advisor profile examples/conv_bias_bn_fixed.py
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
    torch.backends.cudnn.benchmark = True  # static input shapes: let cuDNN pick the fastest
    model = nn.Sequential(
        block(3, 16),
        block(16, 32),
        nn.MaxPool2d(2),
        block(32, 32),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(args.steps):
        x = torch.randn(16, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (16,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

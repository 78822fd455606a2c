"""channels-last, fixed: ``model.to(memory_format=torch.channels_last)`` once and every input
batch ``.to(memory_format=torch.channels_last)``: the convolutions run NHWC Tensor Core
kernels directly, with no layout conversions around them.

Problem twin: channels_last.py. Run: advisor profile examples/channels_last_fixed.py
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
    amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
    model = nn.Sequential(
        block(3, 32),
        block(32, 64),
        nn.MaxPool2d(2),
        block(64, 64),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    model = model.to(device, memory_format=torch.channels_last)  # NHWC weights
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
    for _ in range(args.steps):
        x = torch.randn(32, 3, 32, 32, device=device).to(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (32,), device=device)
        with torch.autocast(device_type=device, dtype=amp_dtype):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


if __name__ == "__main__":
    main()

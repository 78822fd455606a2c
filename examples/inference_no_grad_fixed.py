"""inference-without-no-grad, fixed: the loop runs under ``torch.inference_mode()`` (no graph,
no saved tensors, no version counters).

Problem twin: inference_no_grad.py. Run: advisor profile examples/inference_no_grad_fixed.py
"""

import argparse

import torch
import torch.nn as nn

import advisor


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.TransformerEncoderLayer(
        d_model=128, nhead=4, dim_feedforward=512, batch_first=True
    ).to(device)
    model.eval()
    correct = 0
    with torch.inference_mode():
        for _ in range(args.steps):
            x = torch.randn(32, 16, 128, device=device)
            scores = model(x).mean(dim=(1, 2))
            correct += int((scores > 0).sum())
            advisor.step()
    print("positive:", correct)


if __name__ == "__main__":
    main()

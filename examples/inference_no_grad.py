"""inference-without-no-grad: an evaluation loop in ``model.eval()`` that still records
autograd: every op saves its inputs for a backward that never comes (memory, time).
There is no optimizer, so the loop marks its steps with ``advisor.step()`` (a no-op outside
``advisor profile``).

Fixed twin: inference_no_grad_fixed.py. Run: advisor profile examples/inference_no_grad.py
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
    for _ in range(args.steps):
        x = torch.randn(32, 16, 128, device=device)
        scores = model(x).mean(dim=(1, 2))  # autograd records all of this
        correct += int((scores > 0).sum())
        advisor.step()
    print("positive:", correct)


if __name__ == "__main__":
    main()

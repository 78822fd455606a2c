"""fp32-matmul: a transformer block trained in full FP32 with TF32 off (the default
``float32_matmul_precision="highest"``). On Ampere and newer GPUs the matmuls run on CUDA
cores instead of Tensor Cores.

Fixed twin: fp32_matmul_fixed.py. Run: advisor profile examples/fp32_matmul.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(
        d_model=256, nhead=8, dim_feedforward=1024, batch_first=True
    ).to(device)
    opt = torch.optim.AdamW(block.parameters(), lr=1e-4)
    for _ in range(args.steps):
        x = torch.randn(8, 32, 256, device=device)
        loss = block(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""fp32-matmul, fixed: TF32 for the FP32 matmuls that remain, and bf16 autocast for the block
(Tensor Cores on Ampere and newer; on the CPU autocast uses bf16 kernels where they exist).

Problem twin: fp32_matmul.py. Run: advisor profile examples/fp32_matmul_fixed.py
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
    torch.set_float32_matmul_precision("high")  # TF32 on Tensor Core GPUs
    block = nn.TransformerEncoderLayer(
        d_model=256, nhead=8, dim_feedforward=1024, batch_first=True
    ).to(device)
    opt = torch.optim.AdamW(block.parameters(), lr=1e-4)
    for _ in range(args.steps):
        x = torch.randn(8, 32, 256, device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = block(x).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

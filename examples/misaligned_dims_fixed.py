"""misaligned-dims, fixed: vocab padded to a multiple of 64 (the extra logits are never
targets), hidden 256, batch*seq 8*16. Every GEMM dimension is a multiple of 8.

Problem twin: misaligned_dims.py. Run: advisor profile examples/misaligned_dims_fixed.py
"""

import argparse

import torch
import torch.nn as nn

VOCAB, HIDDEN, BATCH, SEQ = 3001, 256, 8, 16
PADDED_VOCAB = (VOCAB + 63) // 64 * 64  # 3008


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    use_amp = device == "cuda"  # 16-bit GEMMs are where alignment matters
    model = nn.Sequential(
        nn.Embedding(PADDED_VOCAB, HIDDEN),
        nn.Linear(HIDDEN, HIDDEN),
        nn.GELU(),
        nn.Linear(HIDDEN, PADDED_VOCAB),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)
        with torch.autocast(device, dtype=torch.float16, enabled=use_amp):
            logits = model(tokens)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""misaligned-dims: a small language-model head whose sizes are not multiples of 8 (vocab
3001, hidden 250, batch*seq 9*15). In 16-bit on Tensor Core GPUs such GEMMs fall back to
slower tiles or padding kernels.

Fixed twin: misaligned_dims_fixed.py. Run: advisor profile examples/misaligned_dims.py
"""

import argparse

import torch
import torch.nn as nn

VOCAB, HIDDEN, BATCH, SEQ = 3001, 250, 9, 15


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    use_amp = device == "cuda"  # 16-bit GEMMs are where alignment matters
    model = nn.Sequential(
        nn.Embedding(VOCAB, HIDDEN), nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, VOCAB)
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

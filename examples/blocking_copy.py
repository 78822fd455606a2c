"""blocking-copy: each step copies a large batch from pageable memory with a blocking
``.to(device)``, waits for it with ``torch.cuda.synchronize()``, and pulls the logits back with
a blocking ``.cpu()``: the host launches nothing while the copies run, and the GPU computes
nothing while they are on the wire.

Fixed twin: blocking_copy_fixed.py. Run: advisor profile examples/blocking_copy.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batches = [(torch.randn(128, 3, 64, 64), torch.randint(0, 1000, (128,))) for _ in range(4)]
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 1000),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    logits_log = []
    for step in range(args.steps):
        x, y = batches[step % len(batches)]
        x, y = x.to(device), y.to(device)  # pageable source, blocking copy
        if device == "cuda":
            torch.cuda.synchronize()  # wait for the copy before computing
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        logits_log.append(out.detach().cpu())  # blocking device-to-host copy, 512 KB
        logits_log = logits_log[-4:]


if __name__ == "__main__":
    main()

"""blocking-copy, fixed: the batches live in pinned memory and the next one is copied with
``non_blocking=True`` on a side stream while the current step computes (prefetch); the logits
go to a pinned host buffer with ``non_blocking=True`` and nothing waits for them until the end.
On the CPU there is nothing to copy and the loop is the same as the problem twin's.

Problem twin: blocking_copy.py. Run: advisor profile examples/blocking_copy_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    pin = device == "cuda"
    batches = [
        (
            torch.randn(128, 3, 64, 64, pin_memory=pin),
            torch.randint(0, 1000, (128,), pin_memory=pin),
        )
        for _ in range(4)
    ]
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
    side = torch.cuda.Stream() if device == "cuda" else None

    def fetch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batches[i % len(batches)]
        if side is None:
            return x, y
        with torch.cuda.stream(side):  # copy on the side stream, overlapping compute
            return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    logits_host = torch.empty(128, 1000, pin_memory=pin)
    nxt = fetch(0)
    for step in range(args.steps):
        if side is not None:
            torch.cuda.current_stream().wait_stream(side)  # the batch has arrived
            for t in nxt:
                t.record_stream(torch.cuda.current_stream())
        x, y = nxt
        nxt = fetch(step + 1)  # prefetch the next batch now
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        logits_host.copy_(out.detach(), non_blocking=True)  # no wait here
    if device == "cuda":
        torch.cuda.synchronize()  # read logits_host only after this


if __name__ == "__main__":
    main()

"""memory-headroom (info), fixed: the batch is doubled while a trial step's peak memory stays
under 60% of the GPU (``torch.cuda.max_memory_allocated``; capped at 65536 samples so a step
stays short), and the learning rate is scaled with it (up to a cap). On the CPU, where the
finding does not apply, it simply trains with batch 32. The finding is info-level: advisor
estimates no time saving for it, only the memory left unused.

Problem twin: memory_headroom.py. Run: advisor profile examples/memory_headroom_fixed.py
"""

import argparse

import torch
import torch.nn as nn


def make_model(device: str) -> nn.Module:
    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(3, 16), *block(16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)
    ).to(device)


def largest_batch(model: nn.Module, start: int, cap: int, target_frac: float = 0.6) -> int:
    total = torch.cuda.get_device_properties(0).total_memory
    batch = start
    while batch * 2 <= cap:
        torch.cuda.reset_peak_memory_stats()
        try:
            model(torch.randn(batch * 2, 3, 64, 64, device="cuda")).sum().backward()
        except torch.OutOfMemoryError:
            break
        finally:
            model.zero_grad(set_to_none=True)
        if torch.cuda.max_memory_allocated() > target_frac * total:
            break
        batch *= 2
    return batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = make_model(device)
    batch = largest_batch(model, 4, 1 << 16) if device == "cuda" else 32
    opt = torch.optim.SGD(model.parameters(), lr=min(0.01 * batch / 4, 0.2), momentum=0.9)
    for _ in range(args.steps):
        x = torch.randn(batch, 3, 64, 64, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

"""data-parallel, fixed: ``DistributedDataParallel``, one process per GPU, each with its own
model copy; gradients are all-reduced in buckets while backward runs. Launched with
``torchrun --nproc_per_node=N`` it uses torchrun's rendezvous; run directly it forms a
single-process group (world size 1, a file store in a temporary directory, no network), so it
runs anywhere: gloo on the CPU, NCCL on a GPU.

Problem twin: data_parallel.py. Run: advisor profile examples/data_parallel_fixed.py
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    with tempfile.TemporaryDirectory() as tmp:
        if "RANK" in os.environ:  # started by torchrun
            dist.init_process_group(backend)
        else:  # one process, world size 1
            store = dist.FileStore(os.path.join(tmp, "store"), 1)
            dist.init_process_group(backend, store=store, rank=0, world_size=1)
        try:
            train(args.steps)
        finally:
            dist.destroy_process_group()


def train(steps: int) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    layers = [m for _ in range(6) for m in (nn.Linear(512, 512), nn.LayerNorm(512), nn.GELU())]
    net = nn.Sequential(*layers, nn.Linear(512, 10)).to(device)
    model = DDP(net, device_ids=[local_rank] if device != "cpu" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        x = torch.randn(128, 512, device=device)
        y = torch.randint(0, 10, (128,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()  # bucketed all-reduce overlaps backward
        opt.step()


if __name__ == "__main__":
    main()

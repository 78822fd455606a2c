"""A CPU-sized twin of pytorch/examples ``imagenet/main.py --dummy``: a synthetic dataset as
long as ImageNet's (an epoch never ends in practice), a conv net trained with SGD, and a
``validate()`` that would run after the epoch (so the script shows an evaluation code path,
but never reaches it). Images are 3x32x32, so a step takes milliseconds on a CPU.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class FakeData(Dataset):
    """torchvision's FakeData in spirit: a random image and label per index."""

    def __init__(self, size: int, image_size: tuple[int, int, int], num_classes: int) -> None:
        self.size, self.image_size, self.num_classes = size, image_size, num_classes

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(index)
        img = torch.rand(self.image_size, generator=g)
        return img, int(torch.randint(0, self.num_classes, (1,), generator=g))


def make_model(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


def train(loader, model, criterion, optimizer, epoch: int, print_freq: int) -> None:
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(loader):
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i % print_freq == 0:
            print(f"Epoch: [{epoch}][{i}/{len(loader)}]\tTime {time.time() - end:.3f}")
        end = time.time()


def validate(loader, model, criterion) -> float:
    model.eval()
    total = 0.0
    with torch.no_grad():
        for images, target in loader:
            total += criterion(model(images), target).item()
    return total / max(len(loader), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description="imagenet --dummy-like")
    parser.add_argument("--dummy", action="store_true", help="use fake data (the only choice)")
    parser.add_argument("-b", "--batch-size", type=int, default=32)
    parser.add_argument("-j", "--workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("-p", "--print-freq", type=int, default=50)
    args = parser.parse_args()
    train_set = FakeData(1281167, (3, 32, 32), 1000)
    val_set = FakeData(50000, (3, 32, 32), 1000)
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers
    )
    val_loader = DataLoader(val_set, batch_size=args.batch_size, num_workers=args.workers)
    model = make_model(1000)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4)
    for epoch in range(args.epochs):
        train(train_loader, model, criterion, optimizer, epoch, args.print_freq)
        print(f"validation loss {validate(val_loader, model, criterion):.3f}")


if __name__ == "__main__":
    main()

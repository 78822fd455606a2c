"""A CPU-sized twin of pytorch/examples ``mnist/main.py``: a train loader and a test loader, a
train loop with ``optimizer.step()`` and an evaluation loop (``model.eval()`` +
``torch.no_grad()``) after each epoch. Its Dataset reads labels with ``int(tensor)`` (an
``.item()`` on a CPU tensor) as torchvision's ``MNIST.__getitem__`` does. The data are random
28x28 images (made here, nothing is downloaded); the sizes are small so a run takes seconds.

The test loader has ``--test-size / --test-batch-size`` batches (2 by default), fewer than the
advisor's ``--eval-steps`` default.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F  # noqa: N812 (as the original)
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(1152, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class Digits(Dataset):
    """Random digits: uint8 images and int64 labels, converted per sample like MNIST's."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        self.targets = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        img, target = self.data[index], int(self.targets[index])  # .item() on a CPU tensor
        img = (img.float().div(255.0) - 0.1307) / 0.3081
        return img.unsqueeze(0), target


def train(model, loader, optimizer, epoch: int, log_interval: int) -> None:
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}]\tLoss: {loss.item():.6f}")


def test(model, loader) -> None:
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(loader.dataset)
    print(f"Test set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(loader.dataset)}")


def main() -> None:
    parser = argparse.ArgumentParser(description="mnist-like")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=200)
    parser.add_argument("--train-size", type=int, default=768)
    parser.add_argument("--test-size", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--log-interval", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(1)
    train_loader = DataLoader(Digits(args.train_size, 0), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(Digits(args.test_size, 1), batch_size=args.test_batch_size)
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, args.epochs + 1):
        train(model, train_loader, optimizer, epoch, args.log_interval)
        test(model, test_loader)
        scheduler.step()
    print("DONE")


if __name__ == "__main__":
    main()

"""A CPU-sized twin of pytorch/examples ``time_sequence_prediction/train.py``: two LSTMCells
unrolled over a sine wave in float64, trained with ``torch.optim.LBFGS``, whose ``step(closure)``
calls the closure (forward, loss, backward) up to ``max_iter`` times per step; after each step a
prediction under ``torch.no_grad()``. The sequence is shorter than the original's 1000 points
so a step takes a fraction of a second.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn


class Sequence(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input: torch.Tensor, future: int = 0) -> torch.Tensor:  # noqa: A002
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description="time_sequence_prediction-like")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--length", type=int, default=60)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--max-iter", type=int, default=20)
    args = parser.parse_args()
    np.random.seed(2)
    torch.manual_seed(0)
    x = np.empty((args.samples, args.length), np.int64)
    x[:] = np.arange(args.length) + np.random.randint(-40, 40, args.samples).reshape(-1, 1)
    data = np.sin(x / 1.0 / 20).astype("float64")
    input = torch.from_numpy(data[3:, :-1])  # noqa: A001
    target = torch.from_numpy(data[3:, 1:])
    test_input = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])
    seq = Sequence().double()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=args.max_iter)
    for i in range(args.steps):
        print("STEP: ", i)

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            print("loss:", loss.item())
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad():
            future = 20
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            print("test loss:", loss.item())
    print("DONE")


if __name__ == "__main__":
    main()

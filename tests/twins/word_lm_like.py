"""A CPU-sized twin of pytorch/examples ``word_language_model/main.py``: an LSTM language model
trained without a ``torch.optim`` optimizer (the parameters are updated by hand, ``p.data.add_
(p.grad, alpha=-lr)``), so the advisor's steps are the model's calls; ``evaluate()`` runs the
model in ``eval()`` mode under ``torch.no_grad()`` after each epoch. The corpus is random token
ids made here.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int) -> None:
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, inp, hidden):
        output, hidden = self.rnn(self.encoder(inp), hidden)
        return torch.log_softmax(self.decoder(output), dim=-1).view(
            -1, self.decoder.out_features
        ), hidden

    def init_hidden(self, bsz: int):
        w = next(self.parameters())
        return (
            w.new_zeros(self.nlayers, bsz, self.nhid),
            w.new_zeros(self.nlayers, bsz, self.nhid),
        )


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def main() -> None:
    parser = argparse.ArgumentParser(description="word_language_model-like")
    parser.add_argument("--ntokens", type=int, default=500)
    parser.add_argument("--train-tokens", type=int, default=8000)
    parser.add_argument("--val-tokens", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(1111)
    train_data = batchify(torch.randint(0, args.ntokens, (args.train_tokens,)), args.batch_size)
    val_data = batchify(torch.randint(0, args.ntokens, (args.val_tokens,)), 10)
    model = RNNModel(args.ntokens, 32, 32, 2)
    criterion = nn.NLLLoss()
    lr = args.lr

    def evaluate(data_source: torch.Tensor) -> float:
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(10)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i, args.bptt)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden = model.init_hidden(args.batch_size)
        for i in range(0, train_data.size(0) - 1, args.bptt):
            data, targets = get_batch(train_data, i, args.bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
        print(f"end of epoch {epoch} | valid loss {evaluate(val_data):5.2f}")
    print("DONE")


if __name__ == "__main__":
    main()

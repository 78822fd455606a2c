# A stand-in for a user's training script: the report shows lines around the finding.
import torch  # noqa: F401


def train(model, loader, opt):
    for _step, (x, y) in enumerate(loader):
        x = x.cuda()
        y = y.cuda()
        loss = model(x, y)
        loss.backward()
        opt.step()
        print(loss.item())  # <- host waits for the GPU here
        opt.zero_grad()

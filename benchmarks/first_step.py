"""What capturing a long first step costs: an LBFGS ``step(closure)`` (the
time_sequence_prediction twin, tests/twins/time_seq_like.py) plain, under the advisor's probe
(operators with shapes, no memory events, no stacks: what runs from the script's start to its
first steps), and under the probe as it was before (with memory events).

Prints, per configuration, the step's wall time, its ratio to plain Python and the process's
memory growth. The issue's bound: the probed first step at most 3x plain, under 2 GB.

    python benchmarks/first_step.py [--length 200] [--max-iter 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "twins"))


def _rss() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=200, help="points per sequence")
    ap.add_argument("--max-iter", type=int, default=20, help="closure calls per LBFGS step")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import numpy as np
    import torch
    from time_seq_like import Sequence  # type: ignore[import-not-found]
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    np.random.seed(2)
    x = np.arange(args.length) + np.random.randint(-40, 40, 20).reshape(-1, 1)
    data = torch.from_numpy(np.sin(x / 20.0).astype("float64"))
    inp, tgt = data[3:, :-1], data[3:, 1:]
    seq = Sequence().double()
    crit = nn.MSELoss()
    opt = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=args.max_iter)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = crit(seq(inp), tgt)
        loss.backward()
        return loss

    def one_step() -> float:
        t0 = time.perf_counter()
        opt.step(closure)
        return time.perf_counter() - t0

    one_step()  # warm up
    configs = {
        "plain": None,
        "probe (shapes)": {"record_shapes": True},
        "probe before (shapes + memory)": {"record_shapes": True, "profile_memory": True},
    }
    plain = 0.0
    print(
        f"LBFGS step, {args.max_iter} closure calls over {args.length} points, torch {torch.__version__}"
    )
    for name, kw in configs.items():
        times, grew = [], 0
        for _ in range(args.repeat):
            gc.collect()
            before = _rss()
            prof = None
            if kw is not None:
                prof = profile(activities=[ProfilerActivity.CPU], **kw)
                prof.start()
            times.append(one_step())
            grew = max(grew, _rss() - before)
            if prof is not None:
                prof.stop()
            del prof
        t = float(np.median(times))
        plain = plain or t
        print(f"{name:32s} {t * 1e3:9.1f} ms  {t / plain:5.2f}x plain  +{grew / 2**20:7.1f} MiB")


if __name__ == "__main__":
    main()

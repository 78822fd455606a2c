"""What ``advisor profile`` adds to a run: ``python SCRIPT`` against
``advisor profile --run-to-end SCRIPT``, same steps, side by side in one invocation.

    python benchmarks/profile_overhead.py [EXAMPLE] [--steps N] [--repeat R]

Prints the added wall time split into profiler start-up, the profiled steps (probe, warm-up and
window, against the same steps run natively), export, analysis, report and the rest (process
start, imports), and compares the step time after the window with the native one: the target
is that steps outside the window run at native speed.

The native run goes through the same runner (``advisor.profile.execute``, no profiler) with a
global optimizer step hook that only takes timestamps, so both runs count steps the same way.
The advisor run's phase timings are taken by ``PROFILE_CHILD``, which wraps the runner's own
functions from outside (no timing hook in the product).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ``advisor profile ARGS`` as the console script runs it (argv[1]: where the timings go), with
# the runner's phases timed by wrapping its functions: the script's run (the capture), the
# outputs (analysis and report) and the whole command.
PROFILE_CHILD = """
import json, sys, time
import advisor.profile.run as r

out_path = sys.argv[1]
sys.argv = ["advisor", *sys.argv[2:]]
rec = {}
_run, _write, _profile = r._run_script, r._write_outputs, r.run_profile

def run_script(*a, **k):
    t = time.perf_counter()
    res = _run(*a, **k)
    rec["run_s"], rec["cap"] = time.perf_counter() - t, res[1]
    return res

def write_outputs(*a, **k):
    res = _write(*a, **k)
    rec["analysis"] = res[2]
    return res

def run_profile(opts):
    t = time.perf_counter()
    try:
        return _profile(opts)
    finally:
        cap = rec["cap"]
        doc = {"session": cap.timings_s, "analysis": rec.get("analysis") or {},
               "run_s": rec["run_s"], "total_s": time.perf_counter() - t,
               "steps_seen": cap.steps_seen, "step_times_s": cap.step_times_s,
               "window_steps": cap.window_steps}
        with open(out_path, "w") as fh:
            json.dump(doc, fh)

r._run_script, r._write_outputs = run_script, write_outputs
r.run_profile = run_profile  # the profile command imports it from here when it runs
from advisor.cli.entry import main
main()
"""


def _native_child(script: str, args: list[str], out: str) -> None:
    """Run ``script`` like python would, taking a timestamp at every step."""
    import torch  # noqa: F401 (imported before the clock starts, as the advisor run does)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    import advisor
    from advisor.profile.execute import Target, run_target

    t0 = time.perf_counter()
    times: list[float] = []
    state: dict[str, object] = {"primary": None, "explicit": False}

    def on_opt(opt: object, *_: object) -> None:
        if state["explicit"]:
            return
        if state["primary"] is None:
            state["primary"] = id(opt)
        if id(opt) == state["primary"]:
            times.append(time.perf_counter() - t0)

    def on_step() -> None:
        state["explicit"] = True
        times.append(time.perf_counter() - t0)

    register_optimizer_step_post_hook(on_opt)
    advisor._step_hook = on_step
    outcome = run_target(Target("script", script, tuple(args)))
    doc = {"run_s": time.perf_counter() - t0, "step_times_s": times, "code": outcome.exit_code}
    Path(out).write_text(json.dumps(doc), encoding="utf-8")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return time.perf_counter() - t0


def _durations(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times[:-1], times[1:], strict=True)]


def measure(script: str, script_args: list[str], workdir: Path) -> dict[str, object]:
    env = _env()
    native_json = workdir / "native.json"
    native_wall = _timed(
        [sys.executable, __file__, "--native-child", str(native_json), script, "--", *script_args],
        env,
    )
    native = json.loads(native_json.read_text())
    timings = workdir / "advisor.json"
    out = workdir / f"run-{time.time_ns()}"
    adv_wall = _timed(
        [
            sys.executable,
            "-c",
            PROFILE_CHILD,
            str(timings),
            "profile",
            "--run-to-end",
            "--out",
            str(out),
            script,
            *script_args,
        ],
        env,
    )
    adv = json.loads(timings.read_text())
    return {"native_wall": native_wall, "native": native, "adv_wall": adv_wall, "adv": adv}


def report(script: str, script_args: list[str], m: dict[str, object]) -> None:
    native, adv = m["native"], m["adv"]
    assert isinstance(native, dict) and isinstance(adv, dict)
    sess, ana = adv["session"], adv["analysis"]
    n_t, a_t = native["step_times_s"], adv["step_times_s"]
    first, last = (adv.get("window_steps") or [0, 0])[:2]
    k = min(last + 1, len(n_t), len(a_t))  # the step call that closes the window
    window_added = a_t[k - 1] - n_t[k - 1] if k else 0.0
    # the export runs in the step hook that closes the window: inside the next step's time
    export = sess.get("export", 0.0) + sess.get("window_stop", 0.0)
    post_n, post_a = _durations(n_t[k:]), _durations(a_t[k:])
    post_added = (a_t[-1] - a_t[k - 1]) - (n_t[-1] - n_t[k - 1]) - export if k else 0.0
    added = float(m["adv_wall"]) - float(m["native_wall"])  # type: ignore[arg-type]
    parts = {
        "profiler start-up (once)": sess.get("profiler_start", 0.0),
        f"profiled steps 0-{k - 1} (probe, warm-up, window {first}-{last})": window_added,
        "export (trace.json.gz)": export,
        "analysis": ana.get("analysis", 0.0),
        "report (findings.json, report.html)": ana.get("report", 0.0),
        f"steps after the window ({len(post_a)})": post_added,
    }
    parts["other (process start, imports, run.json)"] = added - sum(parts.values())
    print(f"{script} {' '.join(script_args)}: {len(a_t)} steps")
    print(f"  {'python SCRIPT':<58}{m['native_wall']:8.2f} s")
    print(f"  {'advisor profile --run-to-end SCRIPT':<58}{m['adv_wall']:8.2f} s")
    print(f"  {'added':<58}{added:+8.2f} s")
    for name, v in parts.items():
        print(f"    {name:<56}{v:+8.2f} s")
    if post_n[1:] and post_a[1:]:  # the first one holds the export
        mn, ma = statistics.median(post_n[1:]) * 1e3, statistics.median(post_a[1:]) * 1e3
        print(
            f"  median step after the window: native {mn:.3f} ms, under advisor {ma:.3f} ms "
            f"({100.0 * (ma - mn) / mn:+.1f}%)"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--native-child":
        out, script, rest = sys.argv[2], sys.argv[3], sys.argv[4:]
        _native_child(script, rest[1:] if rest[:1] == ["--"] else rest, out)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("example", nargs="?", default=str(REPO / "examples" / "zero_grad.py"))
    ap.add_argument("--steps", type=int, default=200, help="--steps passed to the example")
    ap.add_argument("--repeat", type=int, default=1, help="measure this many times")
    args = ap.parse_args()
    script_args = ["--steps", str(args.steps)]
    with tempfile.TemporaryDirectory(prefix="advisor-overhead-") as tmp:
        for _ in range(args.repeat):
            report(args.example, script_args, measure(args.example, script_args, Path(tmp)))


if __name__ == "__main__":
    main()

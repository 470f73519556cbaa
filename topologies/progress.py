"""thc-run's progress bars: one per mode, fed by the workers' progress lines."""

from __future__ import annotations

import sys


class Progress:
    """One tqdm bar per mode: the slowest worker's step, rank 0's loss and latest test accuracy.

    Its time estimate is the mode's own average pace since its first step (tqdm's smoothing off): steps
    arrive in bursts between evaluations, and a smoothed rate would swing with each pause."""

    def __init__(self, mode: str, steps: int, n_workers: int, clock=None):
        from tqdm import tqdm

        interactive = sys.stderr.isatty()
        self.bar = tqdm(
            total=steps,
            desc=f"{mode:5s} starting",
            unit="step",
            dynamic_ncols=True,
            mininterval=0.2 if interactive else 10.0,
            smoothing=0,
            bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}",
        )
        if clock is not None:  # tests: a clock of their own
            self.bar._time = clock
        self.mode = mode
        self.n_workers = n_workers
        self.steps: dict[int, int] = {}
        self.lost: set[int] = set()  # ranks that died (the others go on without them)
        self.ready = 0
        self.loss = None
        self.acc = None

    def __call__(self, worker, event: dict) -> None:
        kind = event.get("event")
        if kind == "start":
            self.ready += 1
            self.bar.set_description_str(f"{self.mode:5s} {self.ready}/{self.n_workers} ready", refresh=False)
        elif kind == "step":
            if not self.steps:
                self.bar.reset()  # the rate and ETA count from the first step, not from the workers' start
            self.steps[worker.rank] = event["step"]
            if worker.rank == 0:
                self.loss = event["loss"]
            slowest = min(self.steps.get(r, 0) for r in range(self.n_workers) if r not in self.lost)
            if slowest > self.bar.n:
                self.bar.set_description_str(f"{self.mode:5s} training", refresh=False)
                self._postfix()
                self.bar.update(slowest - self.bar.n)  # redraws at most every mininterval
        elif kind == "lost":
            self.lost.add(worker.rank)
            self.bar.write(f"  {self.mode}: worker {worker.host} (rank {worker.rank}) died after step {event['step']}")
        elif kind == "rejoined":
            if worker.rank == min(r for r in range(self.n_workers) if r not in self.lost):
                why = " after the switch restart" if event.get("restarted") else ""
                self.bar.write(
                    f"  {self.mode}: {event['n_workers']} workers go on as job {event['job_id']} "
                    f"(epoch {event['epoch']}){why} from step {event['step'] + 1}"
                )
        elif kind == "epoch":
            self.acc = event["test_acc"]
            self._postfix()
            bpc = event.get("metric", event["test_acc"]) != event["test_acc"]  # the LM: bits per character
            self.bar.write(
                f"  {self.mode} epoch {event['epoch'] + 1:2d}: test accuracy {event['test_acc']:.3f}, "
                f"test loss {event['test_loss']:.3f}"
                + (f", {event['metric']:.3f} bits/char" if bpc else "")
                + f"  ({event['t']:.1f} s)"
            )

    def _postfix(self):
        parts = []
        if self.loss is not None:
            parts.append(f"loss {self.loss:.3f}")
        if self.acc is not None:
            parts.append(f"acc {self.acc:.3f}")
        self.bar.set_postfix_str(", ".join(parts), refresh=False)

    def close(self):
        self.bar.close()

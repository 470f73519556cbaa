"""A user's training script on the "thc" backend, as torchrun starts it on each host: plain torch.distributed
calls, DDP without a communication hook, the switch configured by THC_* variables. Writes what a test
checks to ``$RESULT_DIR/rank<R>.json``."""

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import host_agent.dist_backend  # noqa: F401 - registers the "thc" backend
from host_agent import train, workloads

STEPS = 60


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("thc")
    rank, n = dist.get_rank(), dist.get_world_size()
    record = {"rank": rank, "world_size": n, "backend": dist.get_backend()}

    gathered = [torch.zeros(1) for _ in range(n)]
    dist.all_gather(gathered, torch.tensor([float(rank)]))  # gloo
    record["gathered"] = [float(g) for g in gathered]
    try:
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.MAX)
    except ValueError as refused:
        record["max_refused"] = str(refused)

    workload = workloads.get("mlp-digits")
    config = train.config_for(workload, steps=STEPS)
    model = DDP(workload.build(config.seed))  # no hook: DDP's own all-reduce, which the backend serves
    history = train.train(model, workload.load(), config, rank, n, lambda r: None, metric=workload.metric_of)
    record["parameter_sha256"] = train.parameter_digest(model.module)
    record["final_metric"], record["target"] = history["epochs"][-1]["metric"], workload.target
    record["switch"] = dist.group.WORLD.options.aggregator.stats()
    dist.destroy_process_group()
    Path(os.environ["RESULT_DIR"], f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()

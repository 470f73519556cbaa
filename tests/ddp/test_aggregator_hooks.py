"""The THC DDP communication hook trains a small model on 2 gloo processes as well as plain all-reduce."""

import gc
import hashlib
import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddp.aggregator_hooks import FixedPointHookState, GlooAggregator, THCHookState, fix32_hook, thc_hook
from thc import THCConfig
from thc.errors import ConfigError

WORLD = 2
EPOCHS = 6
MODES = ("allreduce", "thc", "thc_ef", "fix32")


def _train(rank: int, store_path: str, out_dir: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from thc.gradient_sources import load_digits_tensors

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, WORLD), rank=rank, world_size=WORLD)
    x, y = load_digits_tensors()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, test = order[:1437], order[1437:]
    shard = train[rank::WORLD]
    results = {}
    for mode in MODES:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        ddp = DDP(model)
        state = None
        if mode in ("thc", "thc_ef"):
            state = THCHookState(THCConfig(seed=1, error_feedback=mode == "thc_ef"), GlooAggregator())
            ddp.register_comm_hook(state, thc_hook)
        elif mode == "fix32":
            state = FixedPointHookState(GlooAggregator())
            ddp.register_comm_hook(state, fix32_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        gen = torch.Generator().manual_seed(rank)
        for _ in range(EPOCHS):
            perm = shard[torch.randperm(len(shard), generator=gen)]
            for i in range(0, len(perm) - 31, 32):
                batch = perm[i : i + 32]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ddp(x[batch]), y[batch]).backward()
                opt.step()
        with torch.no_grad():
            acc = float((model(x[test]).argmax(1) == y[test]).float().mean())
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().tobytes()
        results[mode] = {
            "acc": acc,
            "params": hashlib.sha256(params).hexdigest(),
            "rounds": getattr(state, "iteration", None),
        }
        del ddp, opt  # the reducer must go before the process group does
        gc.collect()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_thc_hook_trains_like_plain_allreduce_on_two_gloo_processes(tmp_path):
    mp.spawn(_train, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    plain = ranks[0]["allreduce"]["acc"]
    assert plain > 0.9, ranks[0]
    for mode in MODES:
        # every rank decodes the same sums with the same max norms, so the replicas stay identical
        assert ranks[0][mode]["params"] == ranks[1][mode]["params"], mode
        assert ranks[0][mode]["acc"] >= plain - 0.04, (mode, ranks[0])
    steps = EPOCHS * ((1437 // WORLD) // 32)
    assert ranks[0]["thc"]["rounds"] == steps and ranks[0]["fix32"]["rounds"] == steps


def test_hook_state_checks_its_aggregator():
    with pytest.raises(ConfigError, match="has no all_max"):
        THCHookState(THCConfig(), object())
    with pytest.raises(ConfigError, match="THCConfig"):
        THCHookState({"bits": 4}, GlooAggregator())

    class MaxOnly:
        def all_max(self, t):
            return t

    with pytest.raises(ConfigError, match="has no all_sum_table_values"):
        THCHookState(THCConfig(), MaxOnly())
    with pytest.raises(ConfigError, match="has no all_sum_int32"):
        FixedPointHookState(MaxOnly())

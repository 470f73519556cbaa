"""The workloads (host_agent/workloads.py): their data need no download and are the same every time, their
models have the sizes the README gives, an unknown name is one line listing the models, and every model
trains in every mode (2 DDP workers in threads, harness/ddp_cluster.py: thc and fix32 through the fake
switch on the loopback wire, the gloo modes through ddp.gloo_hooks): its loss on a fixed batch falls."""

import numpy as np
import pytest
import torch

from ddp import aggregator_hooks, gloo_hooks
from harness import ddp_cluster as cluster
from host_agent import train, worker, workloads
from topologies import run_cli, runner

MODES = ("thc", "fix32", "gloo", "fp16", "powersgd", "topk", "qsgd", "terngrad")
NAMES = ("mlp-digits", "mlp2-digits", "cnn-digits", "cnn1d-signals", "charlm-stdlib")


def params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_registry_holds_the_models_the_clis_offer():
    assert workloads.names() == list(NAMES)
    # terngrad-switch is the thc hook with another codec: it trains in tests/host_agent/test_switch_quantizers.py;
    # the backend modes are DDP without a hook on the switch's process group: tests/host_agent/test_dist_backend.py;
    # the ps modes are the thc and fix32 hooks at parameter servers: tests/host_agent/test_sharded.py
    assert set(worker.MODES) == {
        *MODES,
        "terngrad-switch",
        "thc-backend",
        "fix32-backend",
        "plan",
        "thc-ps",
        "fix32-ps",
    }
    assert set(run_cli.ALL_MODES) == set(worker.MODES)  # thc-run runs every mode thc-worker has


@pytest.mark.parametrize(
    "name, low, high",
    [
        ("mlp-digits", 2410, 2410),
        ("mlp2-digits", 26122, 26122),
        ("cnn-digits", 38282, 38282),
        ("cnn1d-signals", 90_000, 110_000),
        ("charlm-stdlib", 500_000, 2_000_000),
    ],
)
def test_each_model_has_its_size_and_classes(name, low, high, one_torch_thread):
    w = workloads.get(name)
    model, data = w.build(0), w.load()
    assert low <= params(model) <= high
    out = model(data.x_test[:3])
    classes = len(workloads.VOCAB) if w.metric == "bpc" else 10
    assert out.shape[-1] == classes
    assert int(data.y_train.max()) < classes and int(data.y_test.max()) < classes
    assert torch.equal(w.build(0).state_dict()[next(iter(model.state_dict()))], next(iter(model.state_dict().values())))


def test_the_signals_are_seeded_balanced_and_big_enough():
    workloads.load_signals.cache_clear()
    a = workloads.load_signals()
    workloads.load_signals.cache_clear()
    b = workloads.load_signals()
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert len(a.x_train) + len(a.x_test) >= 4000 and a.x_train.shape[1:] == (1, workloads.SIGNAL_LEN)
    counts = np.bincount(torch.cat([a.y_train, a.y_test]).numpy(), minlength=10)
    assert counts.min() == counts.max() == workloads.SIGNAL_SAMPLES // 10


def test_the_language_model_reads_the_running_interpreters_stdlib():
    files = workloads.stdlib_files()
    assert len(files) > 50 and all(f.suffix == ".py" for f in files)
    d = workloads.load_stdlib_chars()
    assert d.x_train.shape[1] == workloads.CONTEXT and d.x_test.shape == (workloads.VAL_WINDOWS, workloads.CONTEXT)
    assert torch.equal(d.x_train[:, 1:], d.y_train[:, :-1])  # the targets are the next characters
    assert len(d.x_train) * workloads.CONTEXT > 1_000_000
    text = "def f(x):\n\treturn x  # é"
    ids = workloads.encode_text(text)
    assert "".join(workloads.VOCAB[i] for i in ids) == text[:-1] + "\x00"  # anything else is one symbol


def test_the_metric_is_accuracy_or_bits_per_character():
    assert workloads.get("mlp-digits").metric_of(1.0, 0.93) == 0.93
    lm = workloads.get("charlm-stdlib")
    assert lm.metric_of(np.log(2) * 2.5, 0.4) == pytest.approx(2.5)
    assert lm.reached(2.9) and not lm.reached(3.1) and not lm.higher_is_better


def test_an_unknown_model_is_one_line_listing_the_models(capsys):
    argv = ["--rank", "0", "--world-size", "1", "--master-addr", "127.0.0.1", "--iface", "lo", "--model", "resnet"]
    assert worker.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == "thc-worker: unknown model 'resnet'; choose from " + ", ".join(NAMES)
    assert runner.main(["--model", "resnet"]) != 0
    err = capsys.readouterr().err.strip()
    assert err == "thc-run: error: unknown model 'resnet'; choose from " + ", ".join(NAMES)


def _cases():
    for name in NAMES:
        for mode in MODES:
            # the 0.83 M-parameter model through the Python fake switch takes 10-20 s per mode here
            slow = name == "charlm-stdlib" and mode in ("thc", "fix32")
            marks = [pytest.mark.slow] if slow else []
            yield pytest.param(name, mode, marks=marks, id=f"{name}-{mode}")


@pytest.mark.parametrize("name, mode", list(_cases()))
def test_each_model_trains_in_every_mode(name, mode, one_torch_thread, tmp_path):
    lm = name == "charlm-stdlib"
    steps, batch = (3, 4) if lm else (8, 8)
    if mode == "powersgd":  # its ranks must be processes (cluster.train_ddp_in_processes says why)
        # past POWERSGD_START into compressed steps: on charlm-stdlib's two buckets they hung every rank
        # until the hook took one bucket at a time
        steps = max(steps, gloo_hooks.POWERSGD_START + 2)
        ranks = cluster.train_ddp_in_processes(name, mode, steps, tmp_path, batch_size=batch, timeout=120)
    else:
        ranks = cluster.train_ddp(name, mode, steps=steps, batch_size=batch)
    assert ranks[0]["after"] < ranks[0]["before"], ranks[0]
    assert [len(r["digests"]) for r in ranks] == [steps, steps]  # threads or processes: the message can say where
    # the replicas stay identical; if not, the message says at which step and whether the averages differed
    assert torch.equal(ranks[0]["params"], ranks[1]["params"]), cluster.replica_divergence(ranks)


def test_replicas_that_part_are_told_apart_by_the_step_and_what_differed(one_torch_thread):
    """The message of the replicas' assertion above: rank 1 uses its average of round 1 with one coordinate
    off (the same result used differently), so from step 2 its gradients differ from rank 0's."""

    def hook(state, bucket):
        iteration = state.iteration
        fut = aggregator_hooks.thc_hook(state, bucket)
        if state.worker_id != 1 or iteration != 1:
            return fut

        def nudge(done):
            average = done.value()
            average[0] += 0.01
            return average

        return fut.then(nudge)

    ranks = cluster.train_ddp("mlp-digits", "thc", steps=3, batch_size=8, thc_hook=hook)
    message = cluster.replica_divergence(ranks)
    assert not torch.equal(ranks[0]["params"], ranks[1]["params"])
    assert message.startswith("rank 1 differs from rank 0 after step 2: gradients;"), message
    assert "rank 0: timer_retransmissions " in message and "rank 1: timer_retransmissions " in message
    same = cluster.train_ddp("mlp-digits", "thc", steps=3, batch_size=8)
    assert "differs" not in cluster.replica_divergence(same)


def test_a_rank_process_that_dies_ends_the_wait_with_its_exit_code(tmp_path):
    with pytest.raises(RuntimeError, match=r"rank \d of gloo exited with code 1 before it reported"):
        cluster.train_ddp_in_processes("no-such-model", "gloo", 1, tmp_path, timeout=120)


def test_the_training_loop_evaluates_every_eval_every_steps(one_torch_thread):
    w = workloads.get("mlp-digits")
    cfg = train.TrainConfig(steps=10, batch_size=8, eval_every=4)
    history = train.train(w.build(0), w.load(), cfg, 0, 1, lambda r: None, metric=w.metric_of)
    assert [e["step"] for e in history["epochs"]] == [4, 8, 10]
    assert all(e["metric"] == e["test_acc"] for e in history["epochs"])


def test_a_rank_that_does_not_evaluate_trains_on_and_evaluates_only_the_final_model(one_torch_thread):
    w = workloads.get("mlp-digits")
    cfg = train.TrainConfig(steps=10, batch_size=8, eval_every=4)
    asked = []
    history = train.train(
        w.build(0), w.load(), cfg, 0, 1, lambda r: None, metric=w.metric_of, evaluates=lambda: asked.append(1)
    )
    assert len(asked) == 2  # at steps 4 and 8; the evaluation after the last step is not asked
    assert [e["step"] for e in history["epochs"]] == [10] and len(history["steps"]) == 10


def test_evaluations_in_the_background_see_the_model_of_their_step(one_torch_thread):
    """Each background evaluation runs on a snapshot taken at its step, so the figures are those the loop
    would have measured had it stopped there, while training went on."""
    w = workloads.get("mlp-digits")
    cfg = train.TrainConfig(steps=10, batch_size=8, eval_every=4)

    def run(background):
        history = train.train(w.build(0), w.load(), cfg, 0, 1, lambda r: None, background=background)
        return [(e["step"], e["test_loss"], e["test_acc"]) for e in history["epochs"]]

    assert run(True) == run(False) and [s for s, _, _ in run(True)] == [4, 8, 10]


def test_an_error_in_a_background_evaluation_comes_back_to_the_training_thread():
    evaluations = train.BackgroundEvaluation(torch.nn.Linear(2, 2))

    def fail(_model):
        raise ValueError("bad evaluation")

    evaluations.submit(fail)
    with pytest.raises(ValueError, match="bad evaluation"):
        evaluations.wait()
    evaluations.wait()  # raised once


def test_accuracy_is_counted_exactly_so_a_target_on_the_boundary_is_reached():
    logits = torch.zeros(360, 2)
    logits[:342, 0] = 1  # 342 of 360 right: exactly 95 %, which a float32 mean makes 0.94999999
    logits[342:, 1] = 1
    _, acc = train.evaluate(torch.nn.Identity(), logits, torch.zeros(360, dtype=torch.long))
    assert acc == 0.95 and acc >= workloads.get("cnn-digits").target

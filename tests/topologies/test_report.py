"""The summary's time to target follows the model's metric: test accuracy against --target-acc for the
classifiers, validation bits per character against the model's own target for the language model."""

from topologies import report


def record(metric, target, evaluations):
    epochs = [
        {"t": float(t), "test_acc": acc, "test_loss": 1.0, "metric": value, "epoch": 0, "step": 1}
        for t, acc, value in evaluations
    ]
    return {
        "rank": 0,
        "config": {"steps": 10},
        "parameters": 100,
        "final_test_acc": epochs[-1]["test_acc"],
        "final_metric": epochs[-1]["metric"],
        "metric": metric,
        "target": target,
        "epochs": epochs,
        "steps": [{"step_time": 0.01}] * 10,
        "aggregation_s": [0.001] * 10,
        "wire_training": {"tx_bytes": 1000, "rx_bytes": 1000},
        "train_s": 3.0,
    }


def test_a_classifier_is_timed_to_its_accuracy():
    r = report.summarize("thc", [record("accuracy", 0.95, [(1, 0.5, 0.5), (2, 0.91, 0.91), (3, 0.96, 0.96)])], 0.9)
    assert (r.time_to_target_s, r.target, r.final_metric) == (2.0, 0.9, 0.96)
    assert "time to 90%" in report.table([r])


def test_the_language_model_is_timed_to_its_bits_per_character():
    r = report.summarize("fp16", [record("bpc", 3.0, [(1, 0.2, 4.1), (2, 0.3, 3.2), (3, 0.4, 2.9)])], 0.9)
    assert (r.time_to_target_s, r.target, r.final_metric, r.metric) == (3.0, 3.0, 2.9, "bpc")
    table = report.table([r])
    assert "time to 3 bpc" in table and "final bpc" in table and "2.900" in table


def test_summary_json_has_the_time_to_target_speedups(tmp_path):
    rows = [
        report.summarize("thc", [record("accuracy", 0.9, [(1, 0.5, 0.5), (2, 0.95, 0.95)])], 0.9),
        report.summarize("fix32", [record("accuracy", 0.9, [(3, 0.95, 0.95)])], 0.9),
        report.summarize("gloo", [record("accuracy", 0.9, [(1, 0.95, 0.95)])], 0.9),
        report.summarize("topk", [record("accuracy", 0.9, [(1, 0.5, 0.5)])], 0.9),  # never reached it
    ]
    path = tmp_path / "summary.json"
    report.write_json(path, rows, {"model": "mlp-digits", "bw_mbit": 10.0})
    import json

    doc = json.loads(path.read_text())
    assert (doc["model"], doc["bw_mbit"], doc["target"]) == ("mlp-digits", 10.0, 0.9)
    modes = {m["mode"]: m for m in doc["modes"]}
    assert modes["thc"]["time_to_target_s"] == 2.0 and modes["thc"]["final_metric"] == 0.95
    assert (modes["thc"]["speedup_vs_gloo"], modes["thc"]["speedup_vs_fix32"]) == (0.5, 1.5)
    assert modes["gloo"]["speedup_vs_gloo"] == 1.0
    assert modes["topk"]["speedup_vs_gloo"] is None and modes["topk"]["speedup_vs_fix32"] is None


def test_the_verdict_says_what_the_bytes_alone_would_allow():
    def run(mode, t, tx, rx):
        r = record("accuracy", 0.9, [(t, 0.95, 0.95)])
        r["wire_training"] = {"tx_bytes": tx, "rx_bytes": rx}
        return report.summarize(mode, [r], 0.9)

    rows = [run("thc", 1, 500, 1000), run("fix32", 3, 4000, 4000), run("gloo", 4, 6000, 6000)]
    [_, line] = report.verdict_lines(rows)
    assert "3.00x FIX32 via switch" in line and "the bytes alone would allow 4.00x" in line
    assert "4.00x gloo all-reduce" in line and "the bytes alone would allow 6.00x" in line
    assert report.speedups(rows)["thc"]["bytes_allow_vs_gloo"] == 6.0


def test_the_plot_shows_each_modes_evaluations_and_marks_its_time_to_target():
    """training.png's content comes from the summary: each mode's accuracy curve is its evaluations (from
    chance at time 0), a circle sits at the time to target on it, the legend says that time, and the target is
    a dashed line."""
    curves = {
        "thc": record("accuracy", 0.9, [(1, 0.5, 0.5), (2, 0.95, 0.95)]),
        "gloo": record("accuracy", 0.9, [(3, 0.6, 0.6)]),  # never reached it
    }
    for curve in curves.values():
        curve["steps"] = [{"step_time": 0.01, "loss": 2.3}] * 10
    rows = [report.summarize(mode, [curve], 0.9) for mode, curve in curves.items()]
    fig = report.draw(curves, "a run", rows)
    ax_loss, ax_acc = fig.axes
    lines = {line.get_label(): line for line in ax_acc.get_lines()}
    thc = lines["THC via switch (2.0 s to 90%)"]
    assert list(thc.get_xdata()) == [0.0, 1.0, 2.0] and list(thc.get_ydata()) == [0.1, 0.5, 0.95]
    gloo = lines["gloo all-reduce (not reached to 90%)"]
    assert list(gloo.get_xdata()) == [0.0, 3.0] and list(gloo.get_ydata()) == [0.1, 0.6]
    marks = [line for line in ax_acc.get_lines() if line.get_marker() == "o"]
    assert [(list(m.get_xdata()), list(m.get_ydata())) for m in marks] == [([2.0], [0.95])]
    target = [line for line in ax_acc.get_lines() if line.get_linestyle() == "--"]
    assert [list(t.get_ydata()) for t in target] == [[0.9, 0.9]]
    assert len(ax_loss.get_lines()) == 2
    import matplotlib.pyplot as plt

    plt.close(fig)

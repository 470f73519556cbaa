"""The registry of modes (thc/modes.py) is what every consumer reads: a mode it lists is one the hooks,
the plans, the timeline model and both command lines accept, and a borrowed codec is a real switch mode."""

import pytest

from ddp import mixed
from host_agent.worker_cli import build_parser
from planner import profiles, profiling
from thc import modes
from thc.errors import ConfigError
from topologies import run_cli


def test_a_borrowed_codec_is_a_switch_mode_with_its_own_hook():
    for mode in modes.REGISTRY.values():
        if mode.codec is not None:
            base = modes.REGISTRY[mode.codec]
            assert base.sums_on == modes.SWITCH and base.codec is None and not base.backend, mode.name


def test_every_plannable_mode_is_one_a_plan_and_the_timeline_model_take():
    assert set(profiles.modes_for(profiles.preset("tofino"), modes.PLANNABLE_MODES)) == set(modes.PLANNABLE_MODES)
    assert mixed.load_plan({str(k): m for k, m in enumerate(modes.PLANNABLE_MODES)})
    assert set(profiling.PROFILED_MODES) < set(modes.PLANNABLE_MODES)
    assert set(modes.PROBED_PLAN_MODES) <= set(modes.PLANNABLE_MODES) & set(modes.PROBE_MODES)


def test_a_name_outside_the_registry_is_refused_by_a_plan():
    with pytest.raises(ConfigError, match="gloo-fp16"):
        mixed.load_plan({"0": "gloo-fp16"})


def test_both_command_lines_offer_the_registry():
    choices = next(a.choices for a in build_parser()._actions if a.dest == "mode")
    assert tuple(choices) == modes.MODES
    assert run_cli.ALL_MODES == modes.MODES and set(run_cli.MODES) <= set(modes.MODES)

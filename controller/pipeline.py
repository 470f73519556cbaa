"""Is the switch running the THC program this controller was written for?

`check_p4info` compares a P4Info (a switch's, or a build's) with contract/__init__.py and raises
PipelineMismatch naming the first object that is missing or different, instead of letting a later write
fail with an opaque P4Runtime error. It answers the program's cell size (register words per cell), which
fixes how many coordinates a request carries.
"""

from p4.config.v1 import p4info_pb2

import contract
from controller.errors import PipelineMismatch


def check_p4info(p4info: p4info_pb2.P4Info, where: str) -> int:
    """Raise PipelineMismatch naming the first contract object `p4info` lacks; return its words per cell.

    `where` says whose P4Info it is ("the switch s1", "p4/build/thc.p4info.txtpb").
    """
    tables = {t.preamble.name: t for t in p4info.tables}
    actions = {a.preamble.name: a for a in p4info.actions}
    hint = "it is not the THC program of p4/ (push it with `thc-ctl push`)"
    if not tables:
        raise PipelineMismatch(f"{where} has no P4 program: push one with `thc-ctl push`")
    for spec in contract.TABLE_SPECS:
        table = tables.get(spec.name)
        if table is None:
            raise PipelineMismatch(f"{where} has no table '{spec.name}': {hint}")
        fields = {mf.name: mf for mf in table.match_fields}
        for name, width, match_type in spec.keys:
            mf = fields.get(name)
            if mf is None or mf.bitwidth != width or mf.match_type != match_type:
                raise PipelineMismatch(
                    f"{where}: table '{spec.name}' has no {width}-bit "
                    f"{p4info_pb2.MatchField.MatchType.Name(match_type).lower()} key '{name}': {hint}"
                )
        action = actions.get(spec.action)
        if action is None or action.preamble.id not in {ref.id for ref in table.action_refs}:
            raise PipelineMismatch(f"{where}: table '{spec.name}' has no action '{spec.action}': {hint}")
        params = [(p.name, p.bitwidth) for p in action.params]
        if params != list(spec.params):
            wanted = ", ".join(f"{name}: {width}" for name, width in spec.params)
            raise PipelineMismatch(f"{where}: action '{spec.action}' does not take ({wanted}): {hint}")
        if spec.default_action is not None:
            default = actions.get(spec.default_action)
            if default is None or [(p.name, p.bitwidth) for p in default.params] != list(spec.default_params):
                wanted = ", ".join(f"{name}: {width}" for name, width in spec.default_params)
                raise PipelineMismatch(
                    f"{where}: table '{spec.name}' has no default action '{spec.default_action}({wanted})': {hint}"
                )
    counters = {c.preamble.name: c for c in p4info.counters}
    events = counters.get(contract.THC_EVENTS)
    if events is None or events.size < len(contract.EVENTS):
        raise PipelineMismatch(
            f"{where} has no counter '{contract.THC_EVENTS}' with {len(contract.EVENTS)} cells: {hint}"
        )
    job_events = counters.get(contract.THC_JOB_EVENTS)
    if job_events is None or job_events.size != contract.JOB_EVENT_CELLS:
        raise PipelineMismatch(
            f"{where} has no counter '{contract.THC_JOB_EVENTS}' with {contract.JOB_EVENT_CELLS} cells: {hint}"
        )
    words = contract.cell_words(p4info)
    if words not in contract.WORDS_VARIANTS:
        raise PipelineMismatch(
            f"{where} has {words} aggregator registers ({contract.ACC_PREFIX}*); the program's cells have "
            f"{', '.join(map(str, contract.WORDS_VARIANTS))} words: {hint}"
        )
    return words

"""A ticket (contract/ticket.py) is a job's description and the controller's grant in one file: it survives
the file whole, is made from a controller job in one way, keeps the key in one place, and a description
alone (the ps modes' job.json, a file written before tickets) loads as a ticket without a grant."""

import json

import pytest

import contract
from contract.job import JobSpec, JobSpecError
from contract.ticket import Grant, Ticket
from controller.jobs import Job
from thc.config import THCConfig

SPEC = JobSpec(job_id=3, workers=4, codec=THCConfig(bits=3, granularity=20), window=64, slots=128)


def controller_job(**changes) -> Job:
    fields = dict(job_id=3, n_workers=4, slot_base=512, n_slots=128, mcast_grp=4099, worker_mask=0xF, lane_bits=8)
    return Job(**{**fields, "epoch": 41, "key": 0xC0FFEE, **changes})


@pytest.mark.parametrize("pool", [None, (contract.CELLS - 64, 64, 16)], ids=["slots", "pool"])
def test_a_ticket_round_trips_through_its_file(tmp_path, pool):
    ticket = Ticket.granted(SPEC, controller_job(pool=pool, slot_base=contract.SLOTS if pool else 512))
    assert ticket.spec == SPEC.replace(key=0xC0FFEE) and ticket.grant.epoch == 41 and ticket.grant.pool == pool
    ticket.save(tmp_path / "job.json")
    assert Ticket.load(tmp_path / "job.json") == ticket
    text = (tmp_path / "job.json").read_text()
    data = json.loads(text)
    assert list(data) == ["job", "grant"] and "key" not in data["job"]  # the key is the grant's alone
    assert data["grant"]["key"] == 0xC0FFEE and data["job"] == {k: v for k, v in SPEC.to_dict().items() if k != "key"}
    Ticket.load(tmp_path / "job.json").save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == text


def test_a_grant_says_where_the_jobs_cells_are():
    assert Grant.of(controller_job()).describe() == "epoch 41, slots 512..639"
    pooled = Grant.of(controller_job(slot_base=1024, pool=(1984, 64, 16)))
    assert pooled.slots == range(1024, 1152)
    assert pooled.describe() == "epoch 41, slots 1024..1151 and pool cells 1984..2047 from ring offset 16"


def test_a_description_alone_is_a_ticket_without_a_grant(tmp_path):
    """Loaded as the job with the key it holds (0: none yet); saved again it is the same flat file."""
    keyed = SPEC.replace(key=0x1D)
    keyed.save(tmp_path / "job.json")
    ticket = Ticket.load(tmp_path / "job.json")
    assert ticket == Ticket(keyed) and ticket.grant is None
    ticket.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == (tmp_path / "job.json").read_text()


def test_a_ticket_whose_parts_disagree_cannot_be_made():
    with pytest.raises(JobSpecError, match="a ticket's key is its grant's: 0x2, not 0x1") as caught:
        Ticket(SPEC.replace(key=1), Grant(key=2, epoch=1, slot_base=0, n_slots=128))
    assert caught.value.field == "key"
    with pytest.raises(JobSpecError, match="job 3: granted 64 slots, but its description asks for 128"):
        Ticket.granted(SPEC, controller_job(n_slots=64))


@pytest.mark.parametrize(
    "grant, says",
    [
        ({"key": 0}, "grant field 'key' = 0: must be an integer from 1 to 4294967295"),
        ({"epoch": contract.EPOCH_MAX + 1}, f"grant field 'epoch' = {contract.EPOCH_MAX + 1}"),
        ({"slot_base": contract.BOOK_SLOTS}, f"grant field 'slot_base' = {contract.BOOK_SLOTS}"),
        ({"slots": [0, 128]}, "grant unknown field 'slots' (fields: key, epoch, slot_base, n_slots, pool)"),
        ({"pool": {"base": 0, "cells": 64}}, "grant field 'pool' is null or {base, cells, ring_offset}"),
    ],
)
def test_a_malformed_grant_is_refused_in_one_line_naming_its_field(tmp_path, grant, says):
    data = Ticket.granted(SPEC, controller_job()).to_dict()
    data["grant"].update(grant)
    (tmp_path / "job.json").write_text(json.dumps(data))
    with pytest.raises(JobSpecError) as caught:
        Ticket.load(tmp_path / "job.json")
    assert str(caught.value).startswith(f"{tmp_path / 'job.json'}: ") and says in str(caught.value)
    assert "\n" not in str(caught.value)

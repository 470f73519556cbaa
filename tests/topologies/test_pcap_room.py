"""The runner refuses a run whose pcaps could fill the disk, and says how big large ones may get."""

import pytest

from topologies import pcap_room
from topologies.link_rate import gloo_bytes_per_step

GB = 10**9


def test_the_bound_is_every_workers_ring_bytes_both_ways_per_step_mode_and_switch():
    per_step = 2 * gloo_bytes_per_step(826_722, 4) * 4
    assert pcap_room.bound_bytes(826_722, 4, 200, 8) == int(per_step * 200 * 8)
    assert pcap_room.bound_bytes(826_722, 4, 200, 8, switches=3) == int(per_step * 200 * 8 * 3)
    assert pcap_room.bound_bytes(826_722, 1, 200, 8) == 0  # one worker exchanges nothing


def test_a_bound_beyond_the_free_space_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(pcap_room.PcapRoomError) as refused:
        pcap_room.check(66 * GB, 59 * GB, tmp_path, "8 modes x 200 steps")
    message = str(refused.value)
    assert "up to 66.0 GB (8 modes x 200 steps)" in message and "59.0 GB free" in message
    assert "--no-pcap" in message and "--pcap-dir" in message


def test_headroom_is_kept_and_large_runs_are_announced(tmp_path):
    with pytest.raises(pcap_room.PcapRoomError):
        pcap_room.check(95 * GB, 100 * GB, tmp_path, "x")  # above 90 % of the free space
    assert "up to 2.0 GB" in pcap_room.check(2 * GB, 100 * GB, tmp_path, "x")
    assert pcap_room.check(10**8, 100 * GB, tmp_path, "x") is None  # small runs say nothing


def test_free_space_is_read_where_a_missing_directory_would_be_made(tmp_path):
    assert pcap_room.free_bytes(tmp_path / "not" / "yet" / "pcaps") == pcap_room.free_bytes(tmp_path)

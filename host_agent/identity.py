"""Who a worker is and how it meets the others: from `thc-worker`'s options, or from torchrun's environment.

On Mininet `thc-run` passes everything (`--rank`, `--world-size`, `--master-addr`, `--iface`,
`--src-ip`, ...). On real hosts a user starts `thc-worker` under `torchrun`, which sets RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT; the worker then rendezvouses with torch's ``env://`` method, and its switch
addresses default to those of the interface it is told to use. An option given on the command line
always wins over the environment.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

SIOCGIFADDR = 0x8915  # linux/sockios.h: get an interface's IPv4 address


class IdentityError(ValueError):
    """An identity that cannot be resolved; the message says which option or variable to give."""


@dataclass(frozen=True)
class Identity:
    rank: int
    world_size: int
    init_method: str  # torch.distributed's: tcp://ADDR:PORT or env://

    @property
    def from_torchrun(self) -> bool:
        return self.init_method == "env://"


def _env_int(environ, name: str, option: str) -> int:
    text = environ.get(name)
    if text is None:
        raise IdentityError(
            f"{option} is missing and ${name} is not set: give {option}, or start thc-worker under torchrun "
            "(which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)"
        )
    try:
        return int(text)
    except ValueError:
        raise IdentityError(f"${name}={text!r} is not an integer") from None


def resolve(
    rank: int | None, world_size: int | None, master_addr: str | None, master_port: int, environ=None
) -> Identity:
    """Rank, world size and rendezvous: options first, then torchrun's variables."""
    environ = os.environ if environ is None else environ
    rank = rank if rank is not None else _env_int(environ, "RANK", "--rank")
    world_size = world_size if world_size is not None else _env_int(environ, "WORLD_SIZE", "--world-size")
    if world_size < 1:
        raise IdentityError(f"world size {world_size}: must be at least 1")
    if not 0 <= rank < world_size:
        raise IdentityError(f"rank {rank} is not in 0..{world_size - 1}")
    if master_addr is not None:
        return Identity(rank, world_size, f"tcp://{master_addr}:{master_port}")
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(v)]
    if missing:
        raise IdentityError(
            f"no rendezvous: give --master-addr (and --master-port), or set {' and '.join('$' + v for v in missing)} "
            "(torchrun does)"
        )
    return Identity(rank, world_size, "env://")


def interface_mac(iface: str) -> str:
    path = Path(f"/sys/class/net/{iface}/address")
    if not path.exists():
        raise IdentityError(f"no interface {iface!r} here (ip link shows the interfaces): check --iface")
    return path.read_text().strip()


def interface_ipv4(iface: str) -> str:
    """The interface's (first) IPv4 address, as `ip -4 addr show` lists it first."""
    request = struct.pack("256s", iface.encode()[:15])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            answer = fcntl.ioctl(s.fileno(), SIOCGIFADDR, request)
        except OSError:
            raise IdentityError(f"interface {iface!r} has no IPv4 address: give --src-ip, or configure one") from None
    return socket.inet_ntoa(answer[20:24])


def neighbour_mac(ip: str, iface: str, arp_table: str = "/proc/net/arp") -> str | None:
    """The MAC that ``ip`` resolves to on ``iface`` in the kernel's neighbour table, if it is there."""
    try:
        lines = Path(arp_table).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # IP address, HW type, Flags, HW address, Mask, Device; flags 0x0 = incomplete
        if len(fields) >= 6 and fields[0] == ip and fields[5] == iface and fields[2] != "0x0":
            return fields[3]
    return None

"""Random packet loss on a link, without netem.

Mininet emulates loss with netem, which many kernels (this project's CI VM among them) do not have.
Every kernel with ``clsact`` and ``cls_bpf`` (Linux >= 4.5) can run a four-instruction classic BPF
program on an interface's egress hook: draw a random 32-bit number (the ``rand`` ancillary load) and
consume the packet when it is above a threshold. Returning TC_ACT_STOLEN rather than TC_ACT_SHOT makes
the drop silent, as on a wire: the sender (TCP, or a raw AF_PACKET socket) sees a successful send
instead of ENOBUFS. Like netem in a Mininet TCLink, the filter goes on both interfaces of the link, so
each direction loses ``loss`` percent independently.

The filter lives on the interface and disappears with it; nothing host-wide is touched.
"""

from __future__ import annotations

import subprocess
from functools import cache

# classic BPF (linux/filter.h): code, jt, jf, k
_LD_RAND = (0x20, 0, 0, 0xFFFFF000 + 56)  # ld  [SKF_AD_OFF + SKF_AD_RANDOM]
_JGE = 0x35  # jge #k, jt, jf
_RET = 0x06
TC_ACT_OK = 0
TC_ACT_STOLEN = 4


def drop_program(loss_percent: float) -> str:
    """tc's ``bytecode`` string: drop when rand >= (1 - loss) * 2^32."""
    if not 0 <= loss_percent < 100:
        raise ValueError(f"loss must be in [0, 100): {loss_percent}")
    threshold = min(int(round((1 - loss_percent / 100) * 2**32)), 2**32 - 1)
    program = [_LD_RAND, (_JGE, 0, 1, threshold), (_RET, 0, 0, TC_ACT_STOLEN), (_RET, 0, 0, TC_ACT_OK)]
    return ",".join([str(len(program))] + [f"{code} {jt} {jf} {k}" for code, jt, jf, k in program])


def loss_commands(interface: str, loss_percent: float) -> list[str]:
    """Shell commands that make ``interface`` drop ``loss_percent`` % of what it sends from now on
    (0: no loss); they replace whatever loss was set before."""
    commands = [f"tc qdisc replace dev {interface} clsact", f"tc filter del dev {interface} egress"]
    if loss_percent > 0:
        commands.append(f"tc filter add dev {interface} egress bpf da bytecode '{drop_program(loss_percent)}'")
    return commands


@cache
def netem_available() -> bool:
    """Can this kernel emulate delay (sch_netem)? Tried in a throwaway private namespace."""
    try:
        result = subprocess.run(
            ["unshare", "-n", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0

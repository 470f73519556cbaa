"""thc-ctl run in-process, and the one-switch topology the controller tests program."""

import io

from controller.ctl_cli import run


def cli(*argv) -> tuple[int, str, str]:
    """Run thc-ctl with `argv` (any values, turned into strings): (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    status = run([str(a) for a in argv], out, err)
    return status, out.getvalue(), err.getvalue()


def star4(grpc_port: int) -> dict:
    """Four hosts h1..h4 on ports 1..4 of one switch s1, whose P4Runtime server is on `grpc_port`."""
    return {
        "name": "star4",
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i}/24", "mac": f"08:00:00:00:00:0{i}"} for i in range(1, 5)},
        "switches": {"s1": {"device_id": 0, "grpc_port": grpc_port}},
        "links": [[f"h{i}", f"s1-p{i}"] for i in range(1, 5)],
        "aggregation": {"switch": "s1", "service_ip": "10.0.0.254", "service_mac": "02:00:00:00:00:fe"},
    }

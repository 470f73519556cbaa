"""Runtime files in the style of p4lang/tutorials' `sN-runtime.json`.

    {"target": "bmv2", "p4info": "build/x.p4info.txtpb", "bmv2_json": "build/x.json",
     "table_entries": [{"table": ..., "match": {...}, "action_name": ..., "action_params": {...},
                        "default_action": true?, "priority": N?}],
     "multicast_group_entries": [{"multicast_group_id": N, "replicas": [{"egress_port": P, "instance": I}]}],
     "clone_session_entries": [{"clone_session_id": N, "replicas": [...], "packet_length_bytes": L?}]}

Paths are relative to the file's folder (or the current one, where they exist). Unlike the tutorials'
simple_controller, applying is idempotent: existing entries are modified instead of inserted again.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from p4.v1 import p4runtime_pb2

from controller.errors import BadInput
from controller.p4info import P4Info, load_p4info

_TOP_KEYS = {"target", "p4info", "bmv2_json", "table_entries", "multicast_group_entries", "clone_session_entries"}
_ENTRY_KEYS = {"table", "match", "action_name", "action_params", "default_action", "priority"}


@dataclass
class RuntimeFile:
    path: Path
    p4info: Path | None
    bmv2_json: Path | None
    table_entries: list[dict] = field(default_factory=list)
    multicast_groups: list[dict] = field(default_factory=list)
    clone_sessions: list[dict] = field(default_factory=list)


def load(path: str | Path) -> RuntimeFile:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"cannot read runtime file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: byte {exc.start} is not UTF-8: save the file as UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a runtime file is a JSON object")
    if not set(data) & (_TOP_KEYS - {"target"}):
        raise BadInput(f"{path}: nothing to apply: no 'p4info', 'bmv2_json' or entries")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise BadInput(f"{path}: unknown key '{unknown[0]}' (keys: {', '.join(sorted(_TOP_KEYS))})")
    if data.get("target", "bmv2") != "bmv2":
        raise BadInput(f"{path}: target {data['target']!r}: only 'bmv2' is supported")

    def resolve(key):
        value = data.get(key)
        if not value:
            return None
        candidate = path.parent / value
        return candidate if candidate.exists() or not Path(value).exists() else Path(value)

    def listed(key):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise BadInput(f"{path}: '{key}' must be a list of objects")
        return value

    entries = listed("table_entries")
    for i, e in enumerate(entries):
        bad = sorted(set(e) - _ENTRY_KEYS)
        if bad:
            raise BadInput(f"{path}: table_entries[{i}]: unknown key '{bad[0]}'")
        if "table" not in e or "action_name" not in e:
            raise BadInput(f"{path}: table_entries[{i}]: needs 'table' and 'action_name'")
        for key in ("match", "action_params"):
            if key in e and not isinstance(e[key], dict):
                raise BadInput(f"{path}: table_entries[{i}]: '{key}' must be an object")
        if not e.get("default_action") and not e.get("match"):
            raise BadInput(f"{path}: table_entries[{i}]: needs 'match' (or \"default_action\": true)")
    return RuntimeFile(
        path,
        resolve("p4info"),
        resolve("bmv2_json"),
        entries,
        listed("multicast_group_entries"),
        listed("clone_session_entries"),
    )


def check(path: str | Path) -> RuntimeFile:
    """The runtime file, every entry built, so that a bad one is refused before anything is sent: its table
    entries against the P4Info the file names (without one, they are built against the switch's own, once
    connected)."""
    runtime = load(path)
    pre_entries(runtime)
    if runtime.p4info is not None:
        table_entries(P4Info(load_p4info(runtime.p4info)), runtime)
    return runtime


def table_entries(p4info: P4Info, runtime: RuntimeFile) -> list[p4runtime_pb2.TableEntry]:
    built = []
    for i, e in enumerate(runtime.table_entries):
        try:
            priority = e.get("priority") or 0
            if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
                raise BadInput(f"priority {priority!r} is not a non-negative integer")
            built.append(
                p4info.table_entry(
                    e["table"],
                    e.get("match"),
                    e["action_name"],
                    e.get("action_params") or {},
                    priority,
                    bool(e.get("default_action")),
                )
            )
        except BadInput as exc:
            raise BadInput(f"{runtime.path}: table_entries[{i}]: {exc}") from None
    return built


def _replicas(path, where: str, raw) -> list[p4runtime_pb2.Replica]:
    if not isinstance(raw, list):
        raise BadInput(f"{path}: {where}: 'replicas' must be a list")
    replicas = []
    for r in raw:
        try:
            replicas.append(
                p4runtime_pb2.Replica(egress_port=int(r["egress_port"]), instance=int(r.get("instance", 0)))
            )
        except (KeyError, TypeError, ValueError):
            raise BadInput(f'{path}: {where}: a replica is {{"egress_port": P, "instance": I}}, got {r!r}') from None
    return replicas


def pre_entries(runtime: RuntimeFile) -> list[p4runtime_pb2.PacketReplicationEngineEntry]:
    """Multicast groups and clone sessions of the file."""
    out = []
    for i, g in enumerate(runtime.multicast_groups):
        where = f"multicast_group_entries[{i}]"
        pre = p4runtime_pb2.PacketReplicationEngineEntry()
        try:
            pre.multicast_group_entry.multicast_group_id = int(g["multicast_group_id"])
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{runtime.path}: {where}: needs an integer 'multicast_group_id'") from None
        pre.multicast_group_entry.replicas.extend(_replicas(runtime.path, where, g.get("replicas", [])))
        out.append(pre)
    for i, c in enumerate(runtime.clone_sessions):
        where = f"clone_session_entries[{i}]"
        pre = p4runtime_pb2.PacketReplicationEngineEntry()
        try:
            pre.clone_session_entry.session_id = int(c["clone_session_id"])
            pre.clone_session_entry.packet_length_bytes = int(c.get("packet_length_bytes", 0))
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{runtime.path}: {where}: needs an integer 'clone_session_id'") from None
        pre.clone_session_entry.replicas.extend(_replicas(runtime.path, where, c.get("replicas", [])))
        out.append(pre)
    return out

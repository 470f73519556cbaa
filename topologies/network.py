"""The Mininet network of a topology: hosts in namespaces, P4Runtime switches in the root namespace.

Every process and root-namespace interface is written into the run's ledger as it is created, so that
``stop()`` (or ``thc-run --stop`` after a crash) removes exactly those and nothing else: Mininet's own
``cleanup()``/``mn -c`` kill by name machine-wide and are never used. ``Mininet.inited = True`` keeps
Mininet from raising host-wide sysctls.

Hosts are configured for a user-space switch: checksum and segmentation offloads off (an AF_PACKET switch
sees exactly the bytes on the wire, so they must be complete), IPv6 off (no neighbour-discovery noise in
the pcaps), and static ARP entries for every other host and for the THC service address (on two levels also the
worker's leaf's), because the
P4 program forwards IPv4 only and answers no ARP.
"""

from __future__ import annotations

from pathlib import Path

from mininet.link import TCULink
from mininet.net import Mininet
from mininet.node import Host

from controller.topology import Topology
from topologies import interrupts
from topologies.ledger import Ledger, interface_index
from topologies.link_loss import loss_commands, netem_available
from topologies.p4switch import P4RuntimeSwitchNode
from topologies.targets import find_executable, missing_message, switch_command

OFFLOADS_OFF = "tx off rx off tso off gso off gro off"


class NetworkError(RuntimeError):
    pass


class EmulatedNetwork:
    def __init__(
        self,
        topo: Topology,
        target: str,
        ledger: Ledger,
        log_dir: Path,
        pcap_dir: Path | None = None,
        executable: str | None = None,
        say=print,
        switch_log_level: str = "info",
        switch_backend: str = "auto",
        switch_pps: float | None = None,
    ):
        self.topo = topo
        self.target = target
        self.ledger = ledger
        self.log_dir = Path(log_dir)
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.say = say
        self.switch_log_level = switch_log_level
        self.switch_backend = switch_backend
        self.switch_pps = switch_pps
        self.net: Mininet | None = None
        self.executable = executable or find_executable(target)
        if self.executable is None:
            raise NetworkError(missing_message(target))

    # ---- bring-up ---------------------------------------------------------------------------------

    def start(self, ready_timeout: float = 60.0) -> None:
        self._refuse_existing_interfaces()
        if any(link.params.delay_ms for link in self.topo.links) and not netem_available():
            raise NetworkError(
                "a link has a delay, but this kernel has no sch_netem to emulate it; "
                "remove the delay (bandwidth and loss work without netem)"
            )
        Mininet.inited = True  # no host-wide sysctls, no root check of its own
        self.net = Mininet(
            topo=None,
            build=False,
            controller=None,
            host=Host,
            switch=P4RuntimeSwitchNode,
            link=TCULink,
            autoSetMacs=False,
            autoStaticArp=False,
        )
        # each creation and its ledger entry form one step that Ctrl-C cannot split
        for host in self.topo.hosts.values():
            with interrupts.critical():
                node = self.net.addHost(host.name, ip=str(host.ip), mac=host.mac)
                self.ledger.add_process(node.pid, f"host {host.name} (namespace shell)", "SIGHUP")
        for switch in self.topo.switches.values():
            with interrupts.critical():
                node = self.net.addSwitch(
                    switch.name,
                    launch_factory=self._launch,
                    on_start=self.ledger.add_process,
                    grpc_port=switch.grpc_port,
                )
                self.ledger.add_process(node.pid, f"switch {switch.name} (shell)", "SIGHUP")
        for link in self.topo.links:
            tc_params = link.params.mininet_kwargs()
            tc_params.pop("loss", None)  # netem may be missing: topologies.link_loss does it
            with interrupts.critical():
                try:
                    self.net.addLink(
                        link.a.node, link.b.node, port1=self._port(link.a), port2=self._port(link.b), **tc_params
                    )
                except Exception as exc:  # Mininet raises a bare Exception, e.g. when a name appeared since the check
                    raise NetworkError(
                        f"cannot create the link {link.a.node}-{link.b.node}: {str(exc).strip()} (another program "
                        "made an interface of the same name after this run checked; stop it and run again)"
                    ) from None
                for end in (link.a, link.b):
                    if end.node in self.topo.switches:
                        self.ledger.add_interface(self.topo.switches[end.node].interface(end.port))
            if link.params.bw is not None:
                for end in (link.a, link.b):
                    self._check_shaped(end)
            if link.params.loss:
                for end in (link.a, link.b):
                    self._add_loss(end, link.params.loss)
        self.net.build()
        self._configure_hosts()
        self._configure_switch_interfaces()
        if self.pcap_dir:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)
        for node in self.net.switches:
            with interrupts.critical():
                node.start([])
        for switch in self.topo.switches.values():
            self.say(
                f"waiting for {switch.name} (gRPC {switch.grpc_addr}, log {self.log_dir / (switch.name + '.log')})"
            )
            self.net[switch.name].wait_ready(ready_timeout)

    def _check_shaped(self, end) -> None:
        node = self.net[end.node]
        iface = node.intfs[self._port(end)].name
        if "htb" not in node.cmd(f"tc qdisc show dev {iface}"):
            raise NetworkError(f"could not limit the bandwidth of {iface} (tc htb): is sch_htb available?")

    def _add_loss(self, end, loss: float) -> None:
        node = self.net[end.node]
        iface = node.intfs[self._port(end)].name
        for command in loss_commands(iface, loss):
            output = node.cmd(command + " 2>&1")
            if output.strip():
                raise NetworkError(f"cannot emulate {loss}% loss on {iface}: `{command}` said: {output.strip()}")

    def _port(self, end) -> int:
        return 0 if end.port is None else end.port  # a host's only interface is eth0

    def _launch(self, node: P4RuntimeSwitchNode):
        switch = self.topo.switches[node.name]
        return switch_command(
            self.target,
            self.executable,
            switch.name,
            switch.device_id,
            switch.grpc_port,
            self.topo.interfaces(switch.name),
            self.log_dir,
            self.pcap_dir,
            self.switch_log_level,
            backend=self.switch_backend,
            pps=self.switch_pps,
        )

    def _refuse_existing_interfaces(self) -> None:
        taken = [
            iface
            for s in self.topo.switches
            for iface in self.topo.interfaces(s).values()
            if interface_index(iface) is not None
        ]
        if taken:
            raise NetworkError(
                f"interfaces {', '.join(taken)} already exist: another run is up "
                "(stop it with `thc-run --stop`, or whoever made them); nothing was changed"
            )

    def _configure_hosts(self) -> None:
        agg = self.topo.aggregation
        for host in self.topo.hosts.values():
            node = self.net[host.name]
            iface = host.interface
            neighbours = [(h.address, h.mac) for h in self.topo.hosts.values() if h.name != host.name]
            neighbours.append((str(agg.service_ip), agg.service_mac))
            if host.name in self.topo.workers and self.topo.two_level:  # its leaf's service address
                ip, mac = self.topo.service_of(host.name)
                neighbours.append((str(ip), mac))
            commands = [
                f"ethtool -K {iface} {OFFLOADS_OFF}",
                "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
            ]
            commands += [f"ip neigh replace {ip} lladdr {mac} dev {iface} nud permanent" for ip, mac in neighbours]
            node.cmd(" ; ".join(commands) + " >/dev/null 2>&1")

    def _configure_switch_interfaces(self) -> None:
        for switch in self.topo.switches:
            node = self.net[switch]
            for iface in self.topo.interfaces(switch).values():
                # per-interface settings of our own interfaces only; nothing host-wide
                node.cmd(
                    f"ethtool -K {iface} {OFFLOADS_OFF} >/dev/null 2>&1 ; "
                    f"sysctl -qw net.ipv6.conf.{iface}.disable_ipv6=1 >/dev/null 2>&1"
                )

    # ---- use --------------------------------------------------------------------------------------

    def set_loss(self, loss_percent: float) -> None:
        """Change the random loss of every link (percent per direction; 0 removes it), e.g. between tests."""
        for link in self.topo.links:
            for end in (link.a, link.b):
                self._add_loss(end, loss_percent)

    def set_bandwidth(self, mbit: float) -> None:
        """Change the rate of every link; the topology must have been built with a bandwidth (htb)."""
        for link in self.topo.links:
            if link.params.bw is None:
                raise NetworkError("set_bandwidth needs links built with a bandwidth (bw / --bw)")
            for end in (link.a, link.b):
                node = self.net[end.node]
                iface = node.intfs[self._port(end)].name
                out = node.cmd(
                    f"tc class change dev {iface} parent 5:0 classid 5:1 htb rate {mbit:g}Mbit burst 15k 2>&1"
                )
                if out.strip() and "quantum" not in out:
                    raise NetworkError(f"cannot set {mbit:g} Mbit/s on {iface}: {out.strip()}")

    def check_switches(self) -> None:
        """Raise if a switch process has exited (workers would otherwise wait for it until they time out)."""
        for node in self.net.switches:
            code = node.process.poll() if node.process is not None else None
            if code is not None:
                raise NetworkError(f"switch {node.name} exited with code {code}; see {node.launch.log_file}")

    def kill_switch(self, name: str) -> None:
        """SIGKILL switch `name`'s process and reap it (an injected failure, ``thc-run --restart-switch``): its
        interfaces, links and the hosts stay, everything it held (program, tables, registers) is gone."""
        process = self.net[name].process
        if process is not None and process.poll() is None:
            process.kill()
        if process is not None:
            process.wait()

    def restart_switch(self, name: str, ready_timeout: float = 60.0) -> None:
        """Start switch `name` again after it died: the same command line (interfaces, ports, gRPC port),
        its log appended to; return once it answers on gRPC. It runs no program until one is pushed."""
        node = self.net[name]
        with interrupts.critical():
            node.start([], append=True)
        node.wait_ready(ready_timeout)

    def host(self, name: str) -> Host:
        return self.net[name]

    def switch_node(self, name: str) -> P4RuntimeSwitchNode:
        return self.net[name]

    # ---- teardown ---------------------------------------------------------------------------------

    def stop(self, say=None) -> None:
        """Stop the switch processes, then everything else the ledger lists; release Mininet's ptys."""
        say = say or self.say
        if self.net is not None:
            for switch in self.net.switches:
                switch.stop(deleteIntfs=False)
        self.ledger.teardown(report=say)
        if self.net is not None:
            for node in self.net.hosts + self.net.switches:
                try:
                    node.cleanup()
                except OSError:
                    pass
            self.net = None

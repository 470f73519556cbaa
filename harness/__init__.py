"""The harness: stand-ins for the switch and the network, and in-process rigs, that tests and benchmarks
drive the product with. It imports the product and nothing of the product imports it, so no double can
leak into a real run and host_agent needs nothing of controller (tests/ holds the verdicts).

- switch doubles: fake_switch, paced_switch, echo_switch.c, switches (the compiled program in process);
- wires and clusters: loopback (seeded loss, delay, reordering), sim, ddp_cluster, leaf_spine,
  fallback_server, trace_run;
- controllers: shell (p4runtime-shell, unmodified, against a switch under test);
- oracles: frames (THC frames from contract/ alone, not from host_agent's code under test) and
  blocking_hooks (the DDP hooks' rounds in the caller, what the overlapping hooks must equal)."""

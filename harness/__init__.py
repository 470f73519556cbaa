"""The harness: stand-ins for the switch and the network, and in-process rigs, that tests and benchmarks
drive the product with. It imports the product (host_agent, controller, emulator, spec, thc) and nothing of
the product imports it, so no double can leak into a real run and host_agent needs nothing of controller.

- switch doubles: ``fake_switch`` (the contract's aggregation in a few lines of Python), ``paced_switch``
  (the software switch on UDP at a set pace), ``echo_switch.c`` (a C echo on a veth pair, for the socket
  benchmark), and ``switches`` (the compiled program as an in-process target, programmed in contract terms);
- wires and clusters: ``loopback`` (an in-process wire with seeded loss, delay and reordering), ``sim`` (a
  switch engine and n workers on it), ``ddp_cluster`` (DDP workers as threads), ``leaf_spine`` (two levels
  of in-process switches), ``fallback_server`` (a pool job's parameter server behind the switch) and
  ``trace_run`` (a trace of jobs that come and go, under one policy for the switch's memory);
- controllers: ``shell`` (p4runtime-shell, unmodified, pushing a pipeline and entries to a switch under test);
- oracles: ``frames`` (THC frames built from contract/__init__.py alone, not from host_agent's code under test)
  and ``blocking_hooks`` (the DDP hooks' rounds in the caller, what the overlapping hooks must equal).

Named for what it is: the harness around the product, not part of it (``tests/`` holds the verdicts).
"""

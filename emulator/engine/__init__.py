"""The engine of the software switch: BMv2 JSON -> generated Python -> packets.

`compiler.compile_program` turns a p4c BMv2 JSON (v1model) into a CompiledProgram: Python source
generated once per program and `exec`uted into fast functions (parser, controls, deparser), plus the
runtime state they close over (tables, registers, counters). `emulator.switch.SoftwareSwitch` drives
those functions with simple_switch's per-packet semantics.
"""

"""Helpers shared by the test packages: paths, switch targets, mock and fake switches, P4Runtime clients,
Mininet end-to-end support. Tests import them as ``tests.support.<module>``."""

# THC in-network aggregation testbed.
#   make run    bring up the default topology on the software switch and train through it
#               (SWITCH_PPS=900: the software switch slowed to BMv2's pace; TARGET=bmv2: BMv2 itself)
#   make test   run the test suite
# Both install what is missing first (apt packages, then the virtual environment in .venv/).

PYTHON      ?= python3.11
VENV        := .venv
VPY         := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
APT_PKGS    := mininet iputils-ping ethtool iproute2 tcpdump gcc libc6-dev
TOPO        ?=# empty: thc-run picks topologies/star4.json (star4_ps.json when a mode is a ps mode)
TARGET      ?= emulator
WORKERS     ?=
STEPS       ?=
MODES       ?=
MODEL       ?= cnn-digits
LOSS        ?=
BW          ?= auto
SWITCH_PPS  ?=
CODEC       ?=# empty: native (thc-run --codec numpy: the numpy codec and Python I/O, for a before/after)
P4C         ?= p4c-bm2-ss
RECORDS     ?=# make results: records to keep in docs/results/ first (bench/out/NAME.record.json, logs/summary.json)

.PHONY: all setup apt venv run stop test test-fast lint format bench bench-e2e results p4 clean

all: run

setup: apt venv

# Debian packages: Mininet without Open vSwitch (we bring our own switches), ping and ethtool for hosts.
apt:
	@missing=""; \
	for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(STAMP)

# The venv is rebuilt only when the pinned requirements or the project metadata change.
$(STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 (Debian: apt-get install python3 python3-venv)"; exit 1; }
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q -r requirements.lock
	$(VPY) -m pip install -q --no-deps -e .
	@# Debian's Mininet is pure Python: link its package into the venv (mnexec comes from the Debian package).
	@site=$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	  if [ -d /usr/lib/python3/dist-packages/mininet ]; then ln -sfn /usr/lib/python3/dist-packages/mininet $$site/mininet; fi
	touch $(STAMP)

run: setup
	$(VENV)/bin/thc-run $(if $(TOPO),--topo $(TOPO)) --target $(TARGET) $(if $(WORKERS),--workers $(WORKERS)) \
	    $(if $(STEPS),--steps $(STEPS)) $(if $(MODES),--modes $(MODES)) $(if $(LOSS),--loss $(LOSS)) \
	    $(if $(BW),--bw $(BW)) $(if $(MODEL),--model $(MODEL)) $(if $(SWITCH_PPS),--switch-pps $(SWITCH_PPS)) \
	    $(if $(CODEC),--codec $(CODEC))

stop:
	-$(VENV)/bin/thc-run --stop

# --durations: the slowest tests at the end of the report, to keep CI's 90 minutes in sight
test: setup
	$(VPY) -m pytest -q --durations=25

# Without root and without apt once .venv exists: the unit and packet tests only.
test-fast: venv
	$(VPY) -m pytest -q -m "not mininet and not slow"

# ruff: lint rules and the formatter's style, both configured in pyproject.toml.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Benchmarks print figures and write bench/out/ (JSON, PNG); the port benchmarks need root.
bench: setup
	$(VPY) bench/bench_thc.py --quick
	$(VPY) bench/bench_switch.py
	$(VPY) bench/bench_pipeline.py
	$(VPY) bench/bench_switch_ports.py
	$(VPY) bench/bench_host_agent.py --quick

bench-e2e: setup
	$(VPY) bench/bench_e2e.py

# docs/results.md's generated tables, rendered from the records kept in docs/results/; RECORDS="..." keeps
# those runs first (a benchmark's bench/out/<name>.record.json, or thc-run's logs/summary.json).
results: venv
	$(VPY) bench/results.py $(if $(RECORDS),--add $(RECORDS))

# Recompile the P4 program when p4c is installed; otherwise the committed build in p4/build/ is used.
p4:
	@if command -v $(P4C) >/dev/null; then $(MAKE) -C p4 P4C=$(P4C); \
	else echo "$(P4C) not on PATH: using the committed p4/build/ (stamp checked by the tests)"; fi

clean: stop
	rm -rf logs pcaps bench/out

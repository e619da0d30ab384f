# trainprobe developer entry points. `make demo` and `make test` are all a
# fresh machine needs: each creates ./.venv and installs what it uses.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
PROTOGEN := .venv-proto
# torch goes in first and pinned: on these machines 2.13.0 is a local CPU build,
# and the package's torch>=2.3 range then installs nothing more.
TORCH_PIN ?= torch==2.13.0
# The NVRx release the benchmarks compare against. Installed with --no-deps:
# it declares the deprecated `pynvml` distribution, which must never be
# installed here; its real requirements come from the `bench` extra.
NVRX_PIN := nvidia-resiliency-ext==0.4.1
# The generator is pinned (and kept out of the runtime venv) so that the
# committed gencode is reproducible and works with protobuf>=5.29.
GRPC_TOOLS_PIN := grpcio-tools==1.71.0

# Strict on the pure core and the hooks, basic elsewhere (see [tool.mypy]).
TYPECHECK := $(VENV)/bin/mypy -p trainprobe.proto -p trainprobe.hooks -p trainprobe.sidecar

.PHONY: help demo demo-restart demo-gloo test lint proto docs bench bench-quick bench-render clean

# `make` alone lists the targets (each one's `## ` line below) and does nothing
# else: the venv's rule, first in this file, would otherwise be its goal.
.DEFAULT_GOAL := help
help: ## this list
	@awk -F ':.*## ' '/^[a-z][a-z-]*:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q $(TORCH_PIN)
	$(VPY) -m pip install -q -e '.[test]'
	touch $@

# What the demos need and no more (torch, torchft, the package, and numpy, without
# which every torch process warns "Failed to initialize NumPy"): a fraction of
# the test extras' install (Ray, Lightning, transformers, the linters). A venv
# that `make test` already filled has it all.
$(VENV)/.demo-installed: pyproject.toml
	@if [ -f $(VENV)/.installed ] && [ $(VENV)/.installed -nt pyproject.toml ]; then touch $@; exit 0; fi; \
	set -ex; \
	[ -x $(VPY) ] || $(PY) -m venv $(VENV); \
	$(VPY) -m pip install -q --upgrade pip; \
	$(VPY) -m pip install -q $(TORCH_PIN); \
	$(VPY) -m pip install -q -e '.[torchft]' numpy; \
	touch $@

$(PROTOGEN)/.installed:
	$(PY) -m venv $(PROTOGEN)
	$(PROTOGEN)/bin/python -m pip install -q $(GRPC_TOOLS_PIN)
	touch $@

# The replicated story (trainprobe run, 2 replica groups, CPU/gloo): a rank
# hangs, its replica is evicted, the other goes on in seconds without a
# restart, the evicted one rejoins from its live peer. From a fresh clone
# 96 to 114 s in all on 2 cores (the install, then about 60 s of demo).
demo: $(VENV)/.demo-installed ## the replicated story (trainprobe run, an eviction, the rejoin; ~1 min, ~2 with the install)
	$(VPY) examples/replicated_demo.py

# The restart story on an embedded local Ray: a rank hangs, trainprobe kills
# it through Ray, Ray Train resumes from the checkpoint: 65 to 110 s on 2 loaded
# cores, after 85 to 155 s the first time to install the test extras.
demo-restart: $(VENV)/.installed ## the restart story on a local Ray (~1-2 min; the first adds the test extras, 1.5-2.5 min more)
	$(VPY) examples/ray_demo.py

# The same hang with plain torch.distributed (gloo) processes and signals.
demo-gloo: $(VENV)/.demo-installed ## the same hang with plain gloo processes and signals (~25 s)
	$(VPY) examples/demo.py

# tests/test_grafana_dashboard.py runs a real Prometheus (Debian's package),
# tests/test_top.py a real terminal (tmux) and tests/test_incidents_report.py
# a real headless browser (Debian's chromium): installed when missing and root,
# else those tests skip and say why.
test: $(VENV)/.installed $(PROTOGEN)/.installed ## ruff, mypy, every test (about an hour)
	@for tool in prometheus tmux chromium; do command -v $$tool >/dev/null && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && apt-get install -y -qq $$tool >/dev/null) || echo "could not install $$tool"; \
	  else echo "$$tool is not installed (not root): its tests will skip"; fi; done
	$(VENV)/bin/ruff check .
	$(TYPECHECK)
	TRAINPROBE_PROTOC_PYTHON=$(PROTOGEN)/bin/python $(VPY) -m pytest -q

lint: $(VENV)/.installed ## ruff check, ruff format --check, mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TYPECHECK)

proto: $(PROTOGEN)/.installed ## regenerate the protobuf code with the pinned generator
	$(PROTOGEN)/bin/python tools/gen_proto.py

docs: $(VENV)/.installed ## regenerate docs/CONFIG.md from the settings
	$(VPY) -c "from trainprobe.sidecar.config.settings import render_markdown as r; open('docs/CONFIG.md', 'w').write(r())"

$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(VPY) -m pip install -q -e '.[test,bench]'
	$(VPY) -m pip install -q --no-deps $(NVRX_PIN)
	touch $@

# Every benchmark, then docs/PERFORMANCE.md and docs/perf/*.png rendered from
# the results (bench/render.py; `make bench-render` re-renders only): about 40
# minutes on a quiet 2-core machine, the detection benchmark most of it (it
# took 56 minutes on the loaded development machine), plus the fault matrix
# (bench/bench_faults.py: 820 jobs, about 3.5 hours on the loaded 2-core
# development machine; see its docstring for shorter runs) and the recovery
# benchmarks (torchrun restarts, replicas, torchft, a 1 GB incident log: about
# 2.5 hours more there).
bench: $(VENV)/.bench-installed ## every benchmark, then docs/PERFORMANCE.md (hours)
	$(VPY) bench/run_all.py

# The same benchmarks in smoke-test size (a few minutes); docs are not touched.
bench-quick: $(VENV)/.bench-installed ## the benchmarks in smoke-test size (minutes)
	$(VPY) bench/run_all.py --quick

# docs/PERFORMANCE.md and its plots from the results already in bench/results/.
bench-render: $(VENV)/.bench-installed ## docs/PERFORMANCE.md and plots from bench/results/
	$(VPY) bench/render.py

clean: ## remove the venvs, build/ and *.egg-info
	rm -rf $(VENV) $(PROTOGEN) build *.egg-info

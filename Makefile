# Fresh machine:  make demo   (builds .venv, runs the main job)
#                 make test   (builds .venv, runs ruff and both test tiers; make test-fast: the fast tier only)
#                 make lock   (rewrites constraints.txt from a working CPU .venv)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo lint test test-fast test-slow bench lock clean slurm-examples gpu-check slurm-notice

install: $(VENV)/.installed

$(VENV)/.installed: scripts/install.sh setup.cfg pyproject.toml constraints.txt
	bash scripts/install.sh

demo: install
	$(VENV)/bin/distbench scale --gpus 1,2 --model resnet50

# ruff (pyproject.toml): lint and format, both enforced by `make test` and so by CI.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Two tiers (markers in setup.cfg): the fast one (unit, builder and CLI tests; under 3 minutes on 2 cores),
# then the real-process one (tests marked `slow`). `make test`, and so CI, runs both, fast first.
test-fast: lint
	$(PY) -m pytest -ra -m "not slow" tests

test-slow: slurm-notice install
	$(PY) -m pytest -ra -m slow --durations=30 tests

test: slurm-notice test-fast
	$(PY) -m pytest -ra -m slow --durations=30 tests

# Said before the slow tier starts, as root only (tests/test_slurm.py's local_slurm fixture).
slurm-notice:
	@if [ "$$(id -u)" = 0 ]; then echo "make: as root, the slow tier's Slurm tests install slurm-wlm and munge with apt-get and start munged, slurmctld and slurmd on this machine (scripts/slurm-local.sh; stopped at the end if they started them); DISTBENCH_NO_LOCAL_SLURM=1 skips those tests"; fi

# On a GPU node (no install needed: the node's torch with this checkout on PYTHONPATH works too): about 10
# minutes of checks written to one Markdown file (scripts/gpu-check.sh; --print lists them). No GPU: exit 2.
gpu-check:
	bash scripts/gpu-check.sh

bench: install
	$(PY) benchmarks/harness_overhead.py --out docs/benchmarks.md
	$(PY) benchmarks/comm_busbw.py --out docs/benchmarks.md
	$(PY) benchmarks/ci_coverage.py --out docs/benchmarks.md
	$(PY) benchmarks/gate_power.py --out docs/benchmarks.md
	$(PY) benchmarks/gate_probes.py --out docs/benchmarks.md
	$(PY) benchmarks/two_stage_window.py --out docs/benchmarks.md
	$(PY) benchmarks/wall_split.py --out docs/benchmarks.md

# The pins of every installed package but distbench itself and Horovod (built from its sdist), from the
# venv as it is; torch's local build label (+cpu) is dropped so the GPU install's CUDA wheel matches too.
lock:
	{ echo "# Pins for scripts/install.sh (pip install -c constraints.txt), written by 'make lock' from a working"; \
	  echo "# CPU venv. The GPU install drops the torch, tensorflow and CUDA library pins (see scripts/install.sh)."; \
	  $(PY) -m pip freeze --all --exclude-editable | grep -Eiv '^(pip|horovod)( |=)' | sed -E 's/^(torch==[^+]*)\+.*/\1/'; \
	} > constraints.txt

# The example scripts in slurm/, written from distbench/slurm/job.sh.j2 (tests/test_slurm.py checks they are).
slurm-examples: install
	$(PY) -m distbench.slurm.examples slurm

clean:
	rm -rf $(VENV) build *.egg-info distbench-results

# Fresh machine:  make demo   (builds .venv, runs the main job)
#                 make test   (builds .venv, runs the test suite)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: scripts/install.sh setup.cfg pyproject.toml
	bash scripts/install.sh

demo: install
	$(VENV)/bin/distbench scale --gpus 1,2 --model resnet50

test: install
	$(PY) -m pytest -ra tests

bench: install
	$(PY) benchmarks/harness_overhead.py --out docs/benchmarks.md
	$(PY) benchmarks/comm_busbw.py --out docs/benchmarks.md

clean:
	rm -rf $(VENV) build *.egg-info distbench-results

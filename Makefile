# Two commands matter: `make serve` and `make test`. Everything else is a step they call.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
PROTOS := $(shell find protos -name '*.proto')
MODEL_REPO ?= models

.PHONY: install install-gpu install-serve protos serve system-deps lint format test models experiments bench gpu-check screenshot corpus clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

# One stamp per extra: re-running is a no-op until pyproject.toml changes.
$(VENV)/.serve-installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e ".[serve]" --config-settings editable_mode=compat
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e ".[dev]" --config-settings editable_mode=compat
	touch $@ $(VENV)/.serve-installed

protos: $(VENV)/.serve-installed  ## generate the gRPC stubs from protos/ (never edited by hand)
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)

install-serve: $(VENV)/.serve-installed protos  ## the server's runtime only (no torch)

install: $(VENV)/.dev-installed protos  ## everything: train, export, import, serve, catalogs (s2s translate), tests

install-gpu: install-serve  ## add CUDA 13 + cuDNN 9 wheels: a host with only the NVIDIA driver then runs the CUDA provider
	$(PIP) install -e ".[serve,gpu]" --config-settings editable_mode=compat

serve: install-serve  ## serve the committed model repository: HTTP :8000 (KServe REST, LibreTranslate, playground), gRPC :8001, metrics :8002
	$(VENV)/bin/s2s serve --model-repo $(MODEL_REPO)

system-deps:  ## Debian packages the tests use (a real Prometheus, Compose v1 for the compose check, Chromium for the playground)
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v docker-compose >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus docker-compose >/dev/null; }
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }

lint: install  ## the formatter's check and the linter (ruff; settings in pyproject.toml)
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

format: install  ## rewrite the tree as the formatter wants it
	$(VENV)/bin/ruff format --quiet .
	$(VENV)/bin/ruff check --quiet --fix .

test: install system-deps lint  ## set everything up, check the formatting and lint, run the test suite (two workers, then the serial tests)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not serial"
	$(PY) -m pytest -q -m serial

models: install  ## retrain and re-export the default model repository (5,200 steps: about 1 h 45 min on 2 cores with AVX-512 BF16, 6 h on AVX2 only)
	@dpkg -s libjemalloc2 >/dev/null 2>&1 || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libjemalloc2 >/dev/null; }
	bash scripts/make_models.sh all

experiments: install  ## the heads x reversed-input grid of docs/experiments.md
	$(PY) scripts/heads_experiment.py

bench: install  ## the maintained benchmark grids behind docs/BENCHMARKS.md: results in docs/bench/*.json, rendered (about 50 min on 2 cores, from the committed results' timings; keep the machine otherwise idle)
	$(PY) -m bench engine
	$(PY) -m bench serve
	$(PY) -m bench peers
	$(PY) -m bench quality
	$(PY) -m bench profile

gpu-check: install-gpu  ## on an NVIDIA host: CUDA vs CPU parity, the decode table on CUDA, an fp16 bundle, 1 min of serving (< 10 min)
	$(PY) scripts/gpu_check.py --device cuda --out .cache/gpu-check --write

screenshot: install system-deps  ## docs/img/prometheus_latency.png (a real Prometheus) and docs/img/playground.png, by headless Chromium
	@fc-list :lang=ja 2>/dev/null | grep -q . || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fonts-ipafont-gothic >/dev/null; }
	$(PY) scripts/prometheus_screenshot.py
	$(PY) scripts/playground_screenshot.py

corpus: install  ## rebuild data/en-ja/ (training files, held-out set, NOTICE.md) from the pinned packages (downloads ~2.3 GB into .cache/corpus)
	$(PY) -m training.corpus_en_ja --out data/en-ja/ui-strings.tsv --copyleft-out data/en-ja/ui-strings-copyleft.tsv \
	  --heldout-out data/en-ja/heldout-projects.tsv --cache .cache/corpus

clean:
	rm -rf $(VENV) runs .pytest_cache
	find protos -name '*_pb2*.py*' -delete

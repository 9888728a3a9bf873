# Every target that needs Python depends on the stamp file, so `make train` and `make test`
# each do the whole set-up on a fresh machine. pyproject.toml states lower bounds; the exact versions
# the tests run with (torch 2.14.1 / torchvision 0.29.1 among them) are in constraints.txt.
PY      := .venv/bin/python
STAMP   := .venv/.installed
export WANDB_MODE ?= offline
export HF_HUB_OFFLINE := 1
export PYTHONHASHSEED := 0
export OMP_WAIT_POLICY ?= PASSIVE
# pytest-xdist workers: one per core and one more. Minutes of the suite wait, not compute (SLURM's scheduler
# and time limits in tests/cluster/, rendezvous timeouts, sleeps that stand in for slow jobs): the extra
# worker runs other files meanwhile (docs/getting-started.md has the times).
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

.PHONY: help setup browser slurm train test test-fast lint format bench notebooks docs clean

help:  ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' Makefile | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml experiments/pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]' -e ./experiments  # the library, and the experiments package beside it
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install the package (editable) with dev extras, and experiments/

browser:  ## Debian's Chromium, for the demo page's browser test (installed with apt-get when root)
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "warning: chromium is missing and this is not root: the browser test will be skipped"; fi; }

slurm:  ## start the local two-node SLURM cluster of tests/cluster (apt-get slurm-wlm munge when root; `make test` starts it itself)
	scripts/slurm_local.sh start

train: $(STAMP)  ## train hard (Gumbel) attention on synthetic scenes (~5 min, 2 CPUs), then caption a new image
	$(PY) scripts/train_and_caption.py

test: $(STAMP) browser  ## lint, then the whole test suite (slow tests included; Chromium for the demo test)
	$(PY) -m ruff check captioning experiments tests scripts
	$(PY) -m ruff format --check captioning experiments tests scripts
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict  # not --quiet: it hides the warnings --strict counts
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile --durations=30  # the 30 slowest, to keep time in check

test-fast: $(STAMP)  ## the test suite without tests marked slow
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile -m "not slow"

lint: $(STAMP)  ## ruff lint and format check
	$(PY) -m ruff check captioning experiments tests scripts
	$(PY) -m ruff format --check captioning experiments tests scripts

format: $(STAMP)  ## apply ruff formatting and autofixes
	$(PY) -m ruff check --fix captioning experiments tests scripts
	$(PY) -m ruff format captioning experiments tests scripts

bench: $(STAMP)  ## benchmark table (training step, decoding, encoder)
	$(PY) scripts/bench.py

notebooks: $(STAMP)  ## execute the notebooks in place (committed with their figures)
	$(PY) scripts/execute_notebooks.py

docs: $(STAMP)  ## build the documentation site into site/ (mkdocs-material, --strict)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:  ## remove outputs and caches (keeps .venv)
	rm -rf outputs multirun wandb lightning_logs .pytest_cache .ruff_cache site

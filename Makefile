# Everything runs from a local virtualenv that these targets create on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pip prints errors only (warnings about a machine's index configuration are not ours)
PIP_QUIET ?= --quiet --quiet

.PHONY: run test fuzz lint bench clean profiles accuracy

$(STAMP): pyproject.toml
	@echo "installing serveplan and its dependencies into $(VENV) (first time only)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_QUIET) --upgrade pip
	$(BIN)/python -m pip install $(PIP_QUIET) -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/serveplan search --model llama-3.1-8b --gpu h100 --gpus 8 --isl 2048 --osl 64 --ttft 1.5 --tpot 0.07

test: $(STAMP)
	$(BIN)/python -m pytest -q

# hypothesis fuzzing of the CLI (tests/test_fuzz.py); `make fuzz SERVEPLAN_FUZZ_EXAMPLES=2000`
fuzz: $(STAMP)
	SERVEPLAN_FUZZ_EXAMPLES=$${SERVEPLAN_FUZZ_EXAMPLES:-10000} $(BIN)/python -m pytest -q \
		--hypothesis-show-statistics tests/test_fuzz.py

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/bench_oracle.py

profiles: $(STAMP)
	$(BIN)/python -m serveplan.estimator.calibrate --all

accuracy: $(STAMP)
	$(BIN)/python bench/accuracy.py
	$(BIN)/python bench/accuracy_e2e.py --jobs 2 --write-profiles
	$(BIN)/python bench/accuracy_offline.py --jobs 2

clean:
	rm -rf $(VENV) build *.egg-info

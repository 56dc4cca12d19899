# Everything runs from a local virtualenv that these targets create on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/serveplan estimate --model llama-3.1-8b --gpu h100 --tp 1 --phase decode --batch 64 --context-len 2048
	$(BIN)/serveplan estimate --model llama-3.1-8b --gpu h100 --tp 1 --phase prefill --batch 1 --input-len 2048
	$(BIN)/serveplan memory --model llama-3.1-8b --gpu h100 --tp 1

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/bench_oracle.py

clean:
	rm -rf $(VENV) build *.egg-info

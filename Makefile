# Two entry points, each working on a fresh machine (they create/refresh .venv from the pins):
#   make demo   - the main job on a real, non-tile-multiple problem
#   make test   - the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stamp-$(shell cat requirements.txt pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test clean

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	@rm -f $(VENV)/.stamp-*; touch $@

demo: $(STAMP)
	$(PY) -m cutedsl gemm --m 1000 --n 1000 --k 1000 --check

test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile

clean:
	rm -rf $(VENV) .pytest_cache

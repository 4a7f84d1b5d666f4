# One entry point for readers, authors and CI. `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# pytest workers; notebooks stay whole on one worker (--dist loadfile)
JOBS   ?= 2
# Extra pip arguments for torch, e.g. a CPU-only build on a machine without a GPU:
#   make book TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_PIP_ARGS ?=

# The Chinese edition (CONTRIBUTING.md, "Translations"): Sphinx with the root conf.py, tag zh_CN
ZH      := zh_CN
SPHINX  := $(BIN)/sphinx-build -q
# the figures are drawn once, by the English build (book/_generated/): both editions show them
NO_FIGURES = $(if $(wildcard book/_generated/*.png),-D gpudl_model_figures=0)
PO_TOOL := $(BIN)/python book/_ext/gpudl_po.py

.PHONY: help env book book-en book-zh test lint pytest notebooks bench gpu-wheels serve clean \
	pot po i18n-check

help:
	@echo "make book       create $(VENV), install, build both editions of the HTML book:"
	@echo "                English in _build/html, Chinese in _build/html/$(ZH)"
	@echo "make test       create $(VENV), install, run ruff, every test (unit, distributed,"
	@echo "                nbval on all notebooks) and the book build with warnings as errors"
	@echo "make env        only create $(VENV) and install (also done by the targets above)"
	@echo "make lint       ruff;  make pytest: the tests and nbval, without the book build"
	@echo "make notebooks  re-execute every notebook in place on the current backend"
	@echo "make bench      run the benchmarks and write JSON to results/"
	@echo "make gpu-wheels download into .whl/ the wheels a lent GPU machine needs"
	@echo "                (CONTRIBUTING.md, GPU runs; fails if they pass 40 MB)"
	@echo "make serve      serve the built book on http://localhost:8000"
	@echo "make pot        the catalogue templates of every page, into _build/gettext"
	@echo "make po         update locales/$(ZH) from them (translations of moved paragraphs"
	@echo "                reused), and regenerate the Chinese labs notebooks/$(ZH)"
	@echo "make i18n-check how much is translated, and every problem of the translations"
	@echo "make clean      remove _build and $(VENV)"

# constraints.txt: the exact versions CI proves together (pyproject.toml holds the ranges)
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt torch==2.13.0 $(TORCH_PIP_ARGS)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

env: $(STAMP)

book: book-en
	@$(MAKE) --no-print-directory book-zh
	@echo "The book is built: open $(CURDIR)/_build/html/index.html (or run: make serve)"

book-en: $(STAMP)
	rm -rf _build/html _build/.doctrees _build/jupyter_execute
	$(BIN)/jupyter-book build . -W -n --keep-going

book-zh: $(STAMP)
	rm -rf _build/html/$(ZH) _build/.doctrees-$(ZH)
	$(SPHINX) -b html -t $(ZH) -W -n --keep-going $(NO_FIGURES) -d _build/.doctrees-$(ZH) \
	    . _build/html/$(ZH)

pot: $(STAMP)
	rm -rf _build/gettext _build/.doctrees-gettext
	$(SPHINX) -b gettext -W --keep-going $(NO_FIGURES) -d _build/.doctrees-gettext \
	    . _build/gettext

po: pot
	$(BIN)/sphinx-intl update -p _build/gettext -l $(ZH) -d locales
	$(PO_TOOL) memory
	$(PO_TOOL) notebooks

i18n-check: pot
	$(PO_TOOL) check --pot _build/gettext

lint: $(STAMP)
	$(BIN)/ruff check gpudl tests book/_ext conf.py

pytest: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval --nbval-current-env \
	    --nbval-sanitize-with notebooks/sanitize.cfg --nbval-cell-timeout 300 tests notebooks

test: lint book pytest

notebooks: $(STAMP)
	$(BIN)/python -m gpudl notebooks
	$(PO_TOOL) notebooks

bench: $(STAMP)
	$(BIN)/python -m gpudl bench all

gpu-wheels: $(STAMP)
	PYTHON=$(BIN)/python bash .ci/gpu-wheels

serve:
	$(PYTHON) -m http.server --directory _build/html 8000

clean:
	rm -rf _build $(VENV)

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
# the figures are drawn once (`make figures`, or by the English build): both editions show them
NO_FIGURES = $(if $(wildcard book/_generated/*.png),-D gpudl_model_figures=0)
PO_TOOL := $(BIN)/python book/_ext/gpudl_po.py

.PHONY: help env book book-en book-zh figures test lint pytest notebooks bench profiles gpu-wheels \
	serve clean \
	pot po i18n-check cjk-font

help:
	@echo "make book       create $(VENV), install, build both editions of the HTML book:"
	@echo "                English in _build/html, Chinese in _build/html/$(ZH)"
	@echo "make test       create $(VENV), install, run ruff, every test (unit, distributed,"
	@echo "                nbval on all notebooks) and the book build with warnings as errors"
	@echo "make env        only create $(VENV) and install (also done by the targets above)"
	@echo "make lint       ruff;  make pytest: the tests and nbval, without the book build"
	@echo "make notebooks  re-execute every notebook in place on the current backend"
	@echo "make figures    draw the book's model figures (English and Chinese) into book/_generated"
	@echo "make bench      run the benchmarks and write JSON to results/"
	@echo "make profiles   record the book's profiles (torch.profiler) into results/profiles/"
	@echo "                on the simulator and gloo ranks (Appendix E)"
	@echo "make gpu-wheels download into .whl/ the wheels a lent GPU machine needs"
	@echo "                (CONTRIBUTING.md, GPU runs; fails if they pass 40 MB)"
	@echo "make serve      serve the built book on http://localhost:8000"
	@echo "make pot        the catalogue templates of every page, into _build/gettext"
	@echo "make po         update locales/$(ZH) from them (translations of moved paragraphs"
	@echo "                reused), regenerate the Chinese labs notebooks/$(ZH), and update"
	@echo "                the figures' and the extensions' catalogues"
	@echo "make i18n-check how much is translated, and every problem of the translations"
	@echo "                (the glossary's terms across all catalogues, msgfmt -c on each)"
	@echo "make cjk-font   subset the book's CJK font again (book/_static/fonts) when a translation"
	@echo "                uses a character it lacks (NOTO_CJK=FILE: a Noto Sans CJK SC .otf; default:"
	@echo "                Debian's fonts-noto-cjk, downloaded with apt-get)"
	@echo "make clean      remove _build and $(VENV)"

# constraints.txt: the exact versions CI proves together (pyproject.toml holds the ranges)
# Every module must be compiled at install: where PYTHONDONTWRITEBYTECODE is set, as on this
# project's machines, an uncompiled torch is compiled again in every process. pip compiles on
# one core; compileall on all of them (like pip, it goes on past the few files of torch's test
# helpers written for a newer Python, and reports them: hence the `|| true`).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt torch==2.13.0 \
	    $(TORCH_PIP_ARGS)
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[dev]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $(STAMP)

env: $(STAMP)

# the figures once, then both editions side by side (each build runs on one core)
book: figures
	@GPUDL_MODEL_FIGURES=0 $(MAKE) --no-print-directory -j2 --output-sync=target book-en book-zh
	@echo "The book is built: open $(CURDIR)/_build/html/index.html (or run: make serve)"

# every model figure, in English and in Chinese, into book/_generated
figures: $(STAMP)
	$(BIN)/python book/_ext/gpudl_figures.py

# each edition removes only what it writes (the Chinese one: _build/html/$(ZH) and the
# executed notebooks beside it), so that the two can build at once
book-en: $(STAMP)
	rm -rf _build/.doctrees _build/jupyter_execute
	[ ! -d _build/html ] || find _build/html -mindepth 1 -maxdepth 1 ! -name $(ZH) \
	    ! -name jupyter_execute -exec rm -rf {} +
	$(BIN)/jupyter-book build . -W -n --keep-going

book-zh: $(STAMP)
	rm -rf _build/html/$(ZH) _build/html/jupyter_execute _build/.doctrees-$(ZH)
	$(SPHINX) -b html -t $(ZH) -W -n --keep-going $(NO_FIGURES) -d _build/.doctrees-$(ZH) \
	    . _build/html/$(ZH)

pot: $(STAMP)
	rm -rf _build/gettext _build/.doctrees-gettext
	$(SPHINX) -b gettext -W --keep-going $(NO_FIGURES) -d _build/.doctrees-gettext \
	    . _build/gettext

# babel (under sphinx-intl) flags every message holding a % or a {...} as a Python format, which
# markdown never is and `msgfmt -c` then rejects: `flags` removes them, last
po: pot
	$(BIN)/sphinx-intl update -p _build/gettext -l $(ZH) -d locales
	$(PO_TOOL) memory
	$(PO_TOOL) notebooks
	$(PO_TOOL) figures
	$(PO_TOOL) extensions
	$(PO_TOOL) flags

# the book's CJK font (book/_ext/gpudl_fonts.py): the book's characters and the commonest ones
cjk-font: $(STAMP)
	$(BIN)/python book/_ext/gpudl_fonts.py subset $(if $(NOTO_CJK),--source $(NOTO_CJK) --face 0)

# the report, every check of the translations, and `msgfmt -c -o /dev/null` on every catalogue
i18n-check: pot
	$(PO_TOOL) check --pot _build/gettext

lint: $(STAMP)
	$(BIN)/ruff check gpudl tests book/_ext conf.py

pytest: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval --nbval-current-env \
	    --nbval-sanitize-with notebooks/sanitize.cfg --nbval-cell-timeout 300 notebooks tests

test: lint book pytest

notebooks: $(STAMP)
	$(BIN)/python -m gpudl notebooks
	$(PO_TOOL) notebooks

bench: $(STAMP)
	$(BIN)/python -m gpudl bench all

# the stored profiles are the simulator's and gloo's (a GPU's go into results/profiles-cuda.json)
profiles: $(STAMP)
	GPUDL_BACKEND=simulator $(BIN)/python -m gpudl profiles record

gpu-wheels: $(STAMP)
	PYTHON=$(BIN)/python bash .ci/gpu-wheels

serve:
	$(PYTHON) -m http.server --directory _build/html 8000

clean:
	rm -rf _build $(VENV)

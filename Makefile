# Two entry points (see README): `make demo` and `make test`. Everything else is set-up.
VENV     ?= .venv
PY       := $(VENV)/bin/python
PIP      := $(PY) -m pip
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup build test test-rust test-python test-system test-seams test-examples lint docs demo bench peers-venv compare clean

setup: $(VENV)/.deps-installed

$(VENV)/.deps-installed: requirements-dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -r requirements-dev.txt
	# TRL's published chat templates and their {% generation %}-tagged training versions, the
	# reference the ChatTemplate tests check labels against (tests/support/chat_families.py reads the
	# files, never imports trl): --no-deps, since only the .jinja files are needed
	$(PIP) install --no-deps trl==1.16.0
	touch $@

# Release build of the native core, installed editable into the venv.
build: setup
	$(VENV)/bin/maturin develop --release --quiet

# MAKEFLAGS emptied: beside the set-up (make -j2, below) cargo would otherwise join make's
# jobserver and compile on the one slot the set-up leaves it.
test-rust:
	MAKEFLAGS= cargo test --release --locked

# Every test but the system stage's and the seam matrix's: tests/unit (one folder per
# layer of python/youmu), tests/promises (goldens, contracts, saved formats, guards),
# tests/hostile (bad input) and tests/integrations (trainers, S3, the Hub; the Ray
# modules start a cluster each and are marked slow).
# Two pytest-xdist workers (XDIST=-n0 runs in one process): most of these tests wait (process
# start, Gloo rendezvous, DataLoader workers), one process used under a core on average.
# --dist loadfile, with tests/conftest.py's scheduler: a module's tests, and its module-scoped
# fixtures (S3 servers, multi-rank runs shared by several tests), on one worker; the modules
# that start a local Ray cluster all on one worker.
XDIST ?= -n 2 --dist loadfile
test-python: build
	$(PY) -m pytest -q $(XDIST) tests -m "not seams and not system and not slow"

# The system stage, which CI runs after `make test`: tests/system (the release wheel in a
# clean venv, the demos, the examples, the bench SFT job, the documentation's code) and
# the long multi-process jobs of the other folders (marked slow).
# Two xdist workers too, grouped as above: the Ray modules, which timed out when two
# local clusters started at once, share one worker.
test-system: build
	$(PY) -m pytest -q $(XDIST) --durations=15 tests -m "(system or slow) and not seams"

# The seam matrix's trainer jobs (tests/integrations/test_seams.py: real trainers SIGKILLed and
# resumed, the Ray client's on a local cluster), the slow part of the matrix, and the example
# jobs the documentation includes (trainers, DDP, Ray: tests/system/test_docs_examples.py,
# 2 min idle); CI runs it after `make test-system`. On two xdist workers, its jobs dealt one
# at a time, the Ray ones on one worker (tests/conftest.py's scheduler).
test-seams: build
	$(PY) -m pytest -q $(XDIST) --durations=10 tests/integrations/test_seams.py tests/system/test_docs_examples.py -m seams

# The documentation's example jobs alone (also part of `make test-seams`), each run as the
# page shows it (marked seams: `make test` leaves them out).
test-examples: build
	$(PY) -m pytest -q tests/system/test_docs_examples.py -m seams

# The venv's set-up (downloads and unpacking, mostly waiting on the network and the disk)
# runs beside the Rust tests' release build (the cores): on a fresh machine they overlap.
test:
	$(MAKE) -j2 --output-sync=target test-rust setup
	$(MAKE) test-python

# ruff (style, imports, bugs), mypy (types of python/youmu), stubtest (the .pyi stubs
# against the built native module), clippy and rustfmt.
lint: build
	$(VENV)/bin/ruff check python tests benches examples docs
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest youmu._core --mypy-config-file stubtest.ini --ignore-disjoint-bases
	cargo clippy --release --locked --all-targets --features python -- -D warnings
	cargo fmt --check

# The documentation site (mkdocs.yml, docs/): built strictly, so a broken link, a page
# left out of the navigation, a missing API reference target or a docstring mkdocstrings
# cannot read fails it. The guides' code runs in the tests (tests/system/test_docs_examples.py).
docs: build
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

demo: build
	$(PY) examples/demo.py

bench: build
	cargo bench --locked
	$(PY) benches/bench_pages.py
	$(PY) benches/bench_stream.py

# Peer loaders for benches/compare_peers.py live in their own venv: their pins
# (huggingface-hub, transformers) conflict with the project's. The HF `datasets` baselines
# of bench_resume/bench_trainers/bench_vision run there too: a trainer stack of its own.
peers-venv:
	test -x .venv-peers/bin/python || python3 -m venv .venv-peers
	.venv-peers/bin/pip install pyarrow numpy datasets pylance torch transformers accelerate pillow psutil
	test -x .venv-mosaic/bin/python || python3 -m venv .venv-mosaic
	.venv-mosaic/bin/pip install pyarrow numpy mosaicml-streaming

compare: build peers-venv
	$(PY) benches/compare_peers.py

clean:
	rm -rf target $(VENV) demo-out site

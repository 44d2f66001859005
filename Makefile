# SDM: build, demo, tests and benchmarks.  `make help` lists the targets.
#
# Everything runs from the project's own virtual environment (.venv), including MPI:
# mpiexec and libmpi come from the `mpich` wheel, so no system MPI is needed.

SHELL       := /bin/bash
.DEFAULT_GOAL := help

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
MPIEXEC     := $(VENV)/bin/mpiexec
NP          ?= 4

# Tests: seconds allowed for the unit + integration run, and for each mpiexec run.
PYTEST_TIMEOUT ?= 1200
MPI_TIMEOUT    ?= 900
MPI_NPS        ?= 1 2 3 4 8
PYTEST_DIRS    := $(wildcard tests/unit tests/integration)
RESULTS        := .test-results

export PIP_DISABLE_PIP_VERSION_CHECK := 1
ifdef CI
export PIP_PROGRESS_BAR := off
endif

.PHONY: help venv analysis postgres tools readers demo docs test bench peers clean

help:
	@echo "make venv      create .venv (Python >= 3.11) and pip install -e . (the runtime dependencies only)"
	@echo "make demo      run the astro3d example on NP=$(NP) ranks into demo-data/ (installs the runtime only)"
	@echo "make analysis  add the analysis, compression and references extras (xarray, exports, sdm plot, codecs, virtual Zarr)"
	@echo "make docs      build the manual from docs/ into site/ (mkdocs --strict; installs the docs extra)"
	@echo "make test      mypy src, the manual's build, unit + integration tests (real PostgreSQL), then tests/mpi on $(MPI_NPS) ranks"
	@echo "make bench     run every benchmark (BENCHMARKS=... on NP=$(NP) ranks, SERIAL_BENCHMARKS=...); results in benchmarks/results"
	@echo "make postgres  make sure the PostgreSQL server binaries for the tests are installed"
	@echo "make readers   make sure h5dump, ncdump, cc and the Exodus C library (Debian hdf5-tools, netcdf-bin, gcc, libexodusii-dev) are installed for the export tests"
	@echo "make tools     build versitygw (S3 server) and toxiproxy into .tools/bin for the tests (needs Go)"
	@echo "make peers     build the peer stack of benchmarks/peers.py into .peers/ (Open MPI, parallel HDF5, PnetCDF, ADIOS2)"
	@echo "make clean     remove .venv, test results, demo data and build leftovers"

# ---------------------------------------------------------------------------- environment

# One stamp per set of packages, so that each installs once (again when pyproject.toml changes):
# the runtime (make venv, make demo), then the extras of make analysis, make bench, make docs
# and make test on top of it.
venv: $(VENV)/.installed-runtime

$(VENV)/.installed-runtime: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "SDM needs Python >= 3.11; $(PYTHON) is $$($(PYTHON) -V 2>&1). Use: make PYTHON=python3.1x"; exit 1; }
	@if [ ! -x $(PY) ]; then \
	  $(PYTHON) -m venv $(VENV) || { \
	    echo "'$(PYTHON) -m venv' failed; installing Debian's python3-venv"; \
	    rm -rf $(VENV); \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv && \
	    $(PYTHON) -m venv $(VENV); \
	  } || exit 1; \
	fi
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e .
	@touch $@

# The extras each target adds to the runtime (pyproject.toml's optional dependencies).
EXTRAS_analysis := analysis,compression,references
EXTRAS_bench    := bench,analysis,compression,references
EXTRAS_docs     := docs
EXTRAS_test     := test,bench,analysis,compression,references,docs

$(VENV)/.installed-analysis $(VENV)/.installed-bench $(VENV)/.installed-docs $(VENV)/.installed-test: \
  $(VENV)/.installed-%: pyproject.toml $(VENV)/.installed-runtime
	$(PY) -m pip install -e '.[$(EXTRAS_$*)]'
	@touch $@

analysis: $(VENV)/.installed-analysis

# Installs Debian's postgresql (and the unprivileged test user) only if missing; the tests
# start their own server on a free 127.0.0.1 port (tests/integration/pgserver.py).
postgres:
	@$(PYTHON) tests/integration/pgserver.py install

# Builds versitygw and toxiproxy with `go install` (GOBIN=.tools/bin) only if missing; the
# tests start them on free 127.0.0.1 ports (tests/integration/s3server.py).
tools:
	@$(PYTHON) tests/integration/s3server.py install

# Installs Debian's hdf5-tools (h5dump), netcdf-bin (ncdump), gcc + libc6-dev and libexodusii-dev
# (the Exodus II C library) only if missing: the export tests read the exported files back with
# them (tests/integration/readers.py).
readers:
	@$(PYTHON) tests/integration/readers.py install

# ---------------------------------------------------------------------------- running

demo: venv
	$(MPIEXEC) -n $(NP) $(PY) -m sdm.examples.astro3d --root demo-data --verify

BENCHMARKS ?= overhead astro3d ncio lbmpi predictor partition imports cequal
# started with plain Python: they start their own MPI jobs, or need none
SERIAL_BENCHMARKS ?= catalog_scale rank_scale metafile_cost archive

bench: $(VENV)/.installed-bench
	@for b in $(BENCHMARKS); do \
	  echo "======== benchmarks/$$b.py"; \
	  $(MPIEXEC) -n $(NP) $(PY) benchmarks/$$b.py || exit 1; \
	done
	@for b in $(SERIAL_BENCHMARKS); do \
	  echo "======== benchmarks/$$b.py"; \
	  PYTHONPATH=src $(PY) benchmarks/$$b.py || exit 1; \
	done

# The stack SDM is compared with (benchmarks/peers.py), outside `make test`: Debian's Open MPI,
# parallel HDF5 and PnetCDF, ADIOS2 from its source, mpi4py and h5py built against them, SDM
# installed into .peers/venv, the C drivers of PnetCDF and ADIOS2 (see benchmarks/README.md).
peers: $(VENV)/.installed-bench
	bash benchmarks/peer_stack/build.sh

# ---------------------------------------------------------------------------- the manual
#
# mkdocs.yml: MkDocs with the Material theme; docs/hooks.py generates the CLI reference from
# the typer commands and the benchmark pages from benchmarks/. --strict turns every warning
# (a broken link or anchor, a docstring the API reference cannot read) into an error.

MKDOCS_BUILD := env NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site

docs: $(VENV)/.installed-docs
	$(MKDOCS_BUILD)
	@echo "the manual: site/index.html"

# ---------------------------------------------------------------------------- tests
#
# Every part runs (under `timeout`, stdin from /dev/null) even when an earlier one failed;
# tools/test_summary.py then prints one line per part and the totals, and fails if any
# part failed. tests/mpi/conftest.py explains how MPI tests keep ranks in step and time out.

# $(call run_part,NAME,COMMAND): run COMMAND, show its output and keep it in
# $(RESULTS)/NAME.log, its exit status in $(RESULTS)/NAME.rc. Never stops make.
run_part = echo "======== $(1): $(2)"; \
	{ $(2); } </dev/null 2>&1 | tee $(RESULTS)/$(1).log; \
	echo $${PIPESTATUS[0]} > $(RESULTS)/$(1).rc

test: $(VENV)/.installed-test postgres tools readers
	@rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	@$(call run_part,mypy,timeout -k 30 600 $(PY) -m mypy)
	@$(call run_part,docs,timeout -k 30 300 $(MKDOCS_BUILD) && echo the manual built into site/ with --strict)
	@$(call run_part,pytest,timeout -k 30 $(PYTEST_TIMEOUT) $(PY) -m pytest $(PYTEST_DIRS) -q -p no:cacheprovider)
	@for n in $(MPI_NPS); do \
	  $(call run_part,mpi-n$$n,timeout -k 30 $(MPI_TIMEOUT) $(MPIEXEC) -n $$n $(PY) -m pytest tests/mpi -q -p no:cacheprovider); \
	done
	@$(PY) tools/test_summary.py $(RESULTS) mypy docs pytest $(addprefix mpi-n,$(MPI_NPS))

# ---------------------------------------------------------------------------- cleaning

clean:
	-@[ -f .pg/server.json ] && $(PYTHON) tests/integration/pgserver.py stop || true
	rm -rf $(VENV) $(RESULTS) demo-data site build .pg .tools .peers .mypy_cache src/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

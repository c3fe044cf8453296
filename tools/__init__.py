"""The project's CI tooling: Python that CI runs and the tests import, never spreadrl.

Here: ``tools.vllm`` (``contract.py``, run by CI against vLLM's wheel; ``surface.py``,
which feeds the tests' vLLM fakes). It is a package so the tests can import it, outside
the installed ``spreadrl`` and outside its wheel.

What a maintainer runs by hand lives in ``scripts/``: the recalculation corpora the
make targets build, the SpreadsheetBench parity and scoring studies, and the GPU check.
"""

"""The project's Python tooling: run by CI and imported by the tests, never by spreadrl.

Shell scripts that build data for make targets live in ``scripts/``; what is here
is Python that the tests import (``tools.vllm.surface`` feeds the vLLM fakes), so
it is a package, outside the installed ``spreadrl`` and outside its wheel.
"""

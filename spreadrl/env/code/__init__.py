"""The math/code environment (GRPO-TCR's): a Python interpreter tool and answer grading.

:class:`code_env.CodeEnv` runs the model's code in the shared sandbox
(:mod:`spreadrl.env.sandbox`) and grades the final answer or program
(``answers.py``). It keeps the contract of :mod:`spreadrl.env.types` and never imports
:mod:`spreadrl.env.spreadsheet`.
"""

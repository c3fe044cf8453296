"""The Spreadsheet Gym: one workbook task per episode.

The episode (:class:`episode.SpreadsheetEnv`), the workbook it edits (``workbook.py``,
``cell_changes.py``, ``refshift.py``), the agent's tools (``tools/``), recalculation
(``recalc/``) and the checker that scores the result (``checker.py``, SpreadsheetBench's
rules in ``sbench.py``, ``value_compare.py``), with the task checks built on it
(``case_check.py``, ``task_filters.py``). It keeps the contract of
:mod:`spreadrl.env.types` and never imports :mod:`spreadrl.env.code`.
"""

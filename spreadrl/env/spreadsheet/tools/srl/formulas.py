"""The June 2026 scaffold's formula checks before a fill (``verl/verl/tools/formula_fill_core.py``).

What the ``spreadsheet-rl-2606`` preset's fill_formula does to a template
before filling, as upstream's scaffold does (facts, not its code):

- a template without its leading ``=`` gets one;
- ``'text'`` that is not a sheet name (no ``!`` after it) is a string the
  model meant: it becomes ``"text"`` (Excel has no single-quoted strings);
- brackets, braces and quotes must pair up: a failure names the position
  (``formula syntax invalid at position 9: unclosed '('``);
- a few functions whose argument count models often get wrong are checked:
  COUNTIF (2), COUNTIFS (2-254, even), SUMIF (2-3), SUMIFS (3-255, odd),
  LOOKUP (2-3), NETWORKDAYS (2-3), QUOTIENT (2), WORKDAY (2-3).
"""

from __future__ import annotations

import re

from spreadrl.env.spreadsheet.tools.srl.replies import SrlError

ARITY = {
    "COUNTIF": (2, 2),
    "COUNTIFS": (2, 254),
    "LOOKUP": (2, 3),
    "NETWORKDAYS": (2, 3),
    "QUOTIENT": (2, 2),
    "SUMIF": (2, 3),
    "SUMIFS": (3, 255),
    "WORKDAY": (2, 3),
}
PARITY = {"COUNTIFS": 0, "SUMIFS": 1}  # argument count modulo 2
_PAIRS = {"(": ")", "{": "}"}
_CLOSERS = {v: k for k, v in _PAIRS.items()}
_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\($")


def _quoted_end(text: str, start: int) -> int:
    """Index just past the quoted run opening at ``start`` (a doubled quote stays inside)."""
    quote, i = text[start], start + 1
    while i < len(text):
        if text[i] == quote:
            if i + 1 < len(text) and text[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    return len(text)


def normalized(template: str) -> str:
    """The template with its ``=`` and with single-quoted text turned into a string."""
    text = template.strip()
    if text and not text.startswith("="):
        text = "=" + text
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch not in "\"'":
            out.append(ch)
            i += 1
            continue
        end = _quoted_end(text, i)
        run = text[i:end]
        closed = end > i + 1 and run.endswith(ch)
        sheet = text[end:].lstrip().startswith("!")
        if ch == "'" and closed and not sheet:
            literal = run[1:-1].replace("''", "'").replace('"', '""')
            run = f'"{literal}"'
        out.append(run)
        i = end
    return "".join(out)


def _syntax_error(position: int, detail: str) -> SrlError:
    return SrlError("invalid_formula", f"formula syntax invalid at position {position}: {detail}")


def check_syntax(formula: str) -> None:
    """Refuse unpaired quotes, brackets and braces, and wrong argument counts (list above)."""
    stack: list[tuple[str, int, str | None, int]] = []  # opener, position, function, commas
    i = 0
    while i < len(formula):
        ch = formula[i]
        if ch in "\"'":
            end = _quoted_end(formula, i)
            if not formula[i + 1 : end].endswith(ch) or end == i + 1:
                kind = "double quote" if ch == '"' else "single quote"
                raise _syntax_error(i + 1, f"unclosed {kind}")
            i = end
            continue
        if ch in _PAIRS:
            name = _NAME.search(formula[: i + 1]) if ch == "(" else None
            stack.append((ch, i, name.group(1).rsplit(".", 1)[-1].upper() if name else None, 0))
        elif ch == "," and stack:
            opener, pos, fn, commas = stack[-1]
            stack[-1] = (opener, pos, fn, commas + 1)
        elif ch in _CLOSERS:
            if not stack:
                raise _syntax_error(i + 1, f"unexpected {ch!r}")
            opener, pos, fn, commas = stack.pop()
            if opener != _CLOSERS[ch]:
                raise _syntax_error(
                    i + 1, f"expected {_PAIRS[opener]!r} to close {opener!r} at position {pos + 1}"
                )
            _check_arity(fn, commas + 1, formula[pos + 1 : i].strip() == "")
        i += 1
    if stack:
        opener, pos, _, _ = stack[-1]
        raise _syntax_error(pos + 1, f"unclosed {opener!r}")


def _check_arity(function: str | None, count: int, empty: bool) -> None:
    if function not in ARITY:
        return
    count = 0 if empty else count
    low, high = ARITY[function]
    parity = PARITY.get(function)
    if not low <= count <= high or (parity is not None and count % 2 != parity):
        want = f"{low}" if low == high else f"{low}-{high}"
        if parity is not None:
            want += ", an even number" if parity == 0 else ", an odd number"
        raise SrlError(
            "invalid_formula", f"{function} takes {want} arguments; this call passes {count}"
        )

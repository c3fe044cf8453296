"""Cell-level families that reduce a column to one cell.

column_sum / column_average / column_extreme / column_count: SUM, AVERAGE,
MAX/MIN and COUNT of a column; their easy level is the CPU demo's task ("Write
the sum of C3:C20 into cell C22." -> one write_range with ``=SUM(C3:C20)``).
conditional_aggregate: SUMIF/COUNTIF/AVERAGEIF (SUMIFS when hard).
cross_sheet_total: a summary sheet totalling the same column of several sheets.
"""

from __future__ import annotations

import random

from spreadrl.data.synth.base import (
    Book,
    CaseSpec,
    CellValue,
    Family,
    TaskSpec,
    cell_ref,
    pick,
    range_ref,
    sheet_prefix,
    write_call,
)
from spreadrl.data.synth.tables import Layout, choose_layout, table_book
from spreadrl.data.task import CELL_LEVEL

_EASY = {
    "SUM": ("Write the sum of {span} into cell {cell}.", "Put the sum of {span} in cell {cell}."),
    "AVERAGE": (
        "Write the average of {span} into cell {cell}.",
        "Put the average of {span} in cell {cell}.",
    ),
    "MAX": (
        "Write the maximum of {span} into cell {cell}.",
        "Put the maximum of {span} in cell {cell}.",
    ),
    "MIN": (
        "Write the minimum of {span} into cell {cell}.",
        "Put the minimum of {span} in cell {cell}.",
    ),
    "COUNT": (
        "Write the count of numbers in {span} into cell {cell}.",
        "Put the count of numbers in {span} in cell {cell}.",
    ),
}
_WORDS = {
    "SUM": ["total", "sum of", "grand total of"],
    "AVERAGE": ["average", "mean", "average of"],
    "MAX": ["largest", "highest", "maximum"],
    "MIN": ["smallest", "lowest", "minimum"],
    "COUNT": ["count of", "number of values in", "number of filled cells in"],
}
_MEDIUM = (
    "In {where}, calculate the {word} {header} of all rows in the table.",
    "Fill {where} with the {word} {header} of the table.",
    "I need the {word} {header} ({span}) in {where}.",
    "Compute the {word} {header} over every record and put the result in {where}.",
    "What is the {word} {header}? Enter it in {where} using a formula.",
)
_HARD = (
    "On the {summary} sheet, put the {word} {header} from the '{sheet}' sheet into {cell}.",
    "Add the {word} of {header} across all rows of '{sheet}' to cell {cell} of {summary}, "
    "next to the label '{label}'.",
    "The {summary} tab should report the {word} {header} of the '{sheet}' data in {cell}; "
    "fill it in.",
)


def on_rounding_edge(value: object) -> bool:
    """True when ``value`` sits on a 2-place rounding boundary (x.xx5): a last-bit
    difference between Python's and the engine's arithmetic would flip the check."""
    if not isinstance(value, float):
        return False
    return abs(abs(value * 100) % 1 - 0.5) < 1e-6


def _nudged(value: float) -> float:
    """One unit up (a cent for money): moves an average of n > 1 values off an edge."""
    return value + 1 if isinstance(value, int) else round(value + 0.01, 2)


def _reduce(func: str, values: list[CellValue]) -> float:
    numbers = [v for v in values if isinstance(v, int | float)]
    if func == "SUM":
        return sum(numbers)
    if func == "AVERAGE":
        return sum(numbers) / len(numbers)
    if func == "MAX":
        return max(numbers)
    if func == "MIN":
        return min(numbers)
    return len(numbers)


def _aggregate(funcs: tuple[str, ...]):
    def build(rng: random.Random, difficulty: str, n_cases: int) -> TaskSpec:
        func = rng.choice(funcs)
        layout, target = choose_layout(rng, difficulty)
        col = layout.col(target.header)
        data = range_ref(layout.first, col, layout.last, col)
        word = rng.choice(_WORDS[func])
        if difficulty == "hard":
            summary, label = (
                rng.choice(["Summary", "Overview", "Report"]),
                f"{func.title()} {target.header}",
            )
            cell = f"B{rng.randint(2, 6)}"
            answer_sheet, write_range = summary, f"{summary}!{cell}"
            formula = f"={func}({sheet_prefix(layout.sheet)}{data})"
            text = pick(
                rng,
                _HARD,
                summary=summary,
                word=word,
                header=target.header,
                sheet=layout.sheet,
                cell=cell,
                label=label,
            )
        else:
            row = (
                layout.last + rng.choice([1, 2, 2, 3])
                if difficulty == "medium"
                else layout.last + 2
            )
            cell = cell_ref(row, col if rng.random() < 0.7 else layout.left + layout.width + 1)
            answer_sheet = layout.sheet
            formula = f"={func}({data})"
            if difficulty == "easy":
                write_range = cell
                text = pick(rng, _EASY[func], span=data, cell=cell)
            else:
                write_range = f"{sheet_prefix(layout.sheet)}{cell}"
                text = pick(
                    rng,
                    _MEDIUM,
                    where=rng.choice([cell, f"cell {cell}", write_range]),
                    word=word,
                    header=target.header,
                    span=data,
                )
        cases = []
        for _ in range(n_cases):
            rows = layout.rows(rng)
            if func == "COUNT":  # leave some values missing so COUNT is not just the row count
                for i in rng.sample(range(len(rows)), rng.randint(1, max(1, len(rows) // 4))):
                    rows[i][layout.pos(target.header)] = None
            pos = layout.pos(target.header)
            value = _reduce(func, [r[pos] for r in rows])
            while on_rounding_edge(value):  # nudge a value: 2-place rounding must not depend
                bump = next(r for r in rows if r[pos] is not None)  # on the summation order
                bump[pos] = _nudged(bump[pos])
                value = _reduce(func, [r[pos] for r in rows])
            book = table_book(layout, rows)
            if difficulty == "hard":
                book.sheet(answer_sheet)[(int(cell[1:]), 1)] = label
            answer = book.copy()
            answer.sheet(answer_sheet)[(int(cell[1:]), _col(cell))] = value
            cases.append(CaseSpec(book, answer, [write_call(write_range, [[formula]])]))
        position = f"{sheet_prefix(answer_sheet)}{cell}"
        return TaskSpec(text, CELL_LEVEL, position, cases, {"function": func})

    return build


def _col(cell: str) -> int:
    from openpyxl.utils.cell import column_index_from_string, coordinate_from_string

    return column_index_from_string(coordinate_from_string(cell)[0])


def _row(cell: str) -> int:
    return int("".join(ch for ch in cell if ch.isdigit()))


# ---------------------------------------------------------------- conditional

_COND_EASY = {
    "SUMIF": ('Write the sum of {vals} where {keys} equals "{key}" into cell {cell}.',),
    "COUNTIF": ('Write the number of cells in {keys} equal to "{key}" into cell {cell}.',),
    "AVERAGEIF": ('Write the average of {vals} where {keys} equals "{key}" into cell {cell}.',),
}
_COND_MEDIUM = {
    "SUMIF": (
        "In {cell}, total the {val} of the rows whose {kh} is {key}.",
        'Sum {val} for {kh} = "{key}" and write it to {cell}.',
        "What is the total {val} for {key}? Put the answer in {cell}.",
    ),
    "COUNTIF": (
        'In {cell}, count how many rows have {kh} "{key}".',
        "Count the records where {kh} is {key}; result in {cell}.",
        "How many entries belong to {key} ({kh})? Answer in {cell}.",
    ),
    "AVERAGEIF": (
        "In {cell}, give the average {val} of the rows whose {kh} is {key}.",
        'Average {val} for {kh} = "{key}" into {cell}.',
    ),
}
_COND_HARD = (
    'In {cell}, compute the total {val} for rows where {kh} is "{key}" and {kh2} is "{key2}".',
    "Sum the {val} of every record with {kh} {key} and {kh2} {key2}, and put it in {cell}.",
    "Fill {cell} with the combined {val} of {key} entries whose {kh2} is {key2}.",
)


def _conditional(rng: random.Random, difficulty: str, n_cases: int) -> TaskSpec:
    layout, target = choose_layout(
        rng, difficulty, domains=("sales", "staff", "inventory", "expenses", "grades")
    )
    texts = [c for c in layout.domain.columns if c.kind == "text"]
    key_col = rng.choice(texts)
    if difficulty == "easy":
        layout = Layout("Sheet1", layout.domain, (key_col, target), layout.top, layout.n_rows)
    func = "SUMIF" if difficulty == "hard" else rng.choice(["SUMIF", "COUNTIF", "AVERAGEIF"])
    key = rng.choice(key_col.pool)
    second = [c for c in texts if c is not key_col] if difficulty == "hard" else []
    key2_col = rng.choice(second) if second else None
    key2 = rng.choice(key2_col.pool) if key2_col else None
    kc, vc = layout.col(key_col.header), layout.col(target.header)
    keys, vals = (
        range_ref(layout.first, kc, layout.last, kc),
        range_ref(layout.first, vc, layout.last, vc),
    )
    cell = cell_ref(layout.last + 2, vc)
    fields = dict(vals=vals, keys=keys, key=key, cell=cell, val=target.header, kh=key_col.header)
    if func == "SUMIF" and key2_col is not None:
        k2c = layout.col(key2_col.header)
        keys2 = range_ref(layout.first, k2c, layout.last, k2c)
        formula = f'=SUMIFS({vals},{keys},"{key}",{keys2},"{key2}")'
        text = pick(rng, _COND_HARD, kh2=key2_col.header, key2=key2, **fields)
    else:
        formula = {
            "SUMIF": f'=SUMIF({keys},"{key}",{vals})',
            "COUNTIF": f'=COUNTIF({keys},"{key}")',
            "AVERAGEIF": f'=AVERAGEIF({keys},"{key}",{vals})',
        }[func]
        text = pick(rng, _COND_EASY[func] if difficulty == "easy" else _COND_MEDIUM[func], **fields)
    write_range = cell if difficulty == "easy" else f"{sheet_prefix(layout.sheet)}{cell}"
    cases = []
    for _ in range(n_cases):
        rows = layout.rows(rng)
        ki, vi = layout.pos(key_col.header), layout.pos(target.header)
        for i in rng.sample(range(len(rows)), 2):  # the criterion always matches some rows
            rows[i][ki] = key
            if key2_col is not None:
                rows[i][layout.pos(key2_col.header)] = key2
        match = [
            r
            for r in rows
            if r[ki] == key and (key2_col is None or r[layout.pos(key2_col.header)] == key2)
        ]
        if func == "COUNTIF":
            value: float = len(match)
        elif func == "AVERAGEIF":
            value = sum(r[vi] for r in match) / len(match)
            while on_rounding_edge(value):
                match[0][vi] = _nudged(match[0][vi])
                value = sum(r[vi] for r in match) / len(match)
        else:
            value = sum(r[vi] for r in match)
        book = table_book(layout, rows)
        answer = book.copy()
        answer.sheet(layout.sheet)[(_row(cell), vc)] = value
        cases.append(CaseSpec(book, answer, [write_call(write_range, [[formula]])]))
    return TaskSpec(
        text, CELL_LEVEL, f"{sheet_prefix(layout.sheet)}{cell}", cases, {"function": func}
    )


# ---------------------------------------------------------------- cross-sheet

_CROSS = (
    "On the {summary} sheet, fill {span} with the total {header} of each monthly sheet "
    "({months}), in that order.",
    "{summary}!{span} should hold the sum of {header} from the sheets {months}, one per row.",
    "For each of the sheets {months}, put its total {header} into column B of {summary} "
    "({span}), next to the sheet's name.",
)
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def _cross_sheet(rng: random.Random, difficulty: str, n_cases: int) -> TaskSpec:
    layout, target = choose_layout(rng, difficulty, domains=("sales", "expenses"))
    n_sheets = 2 if difficulty == "medium" else rng.randint(3, 4)
    start = rng.randint(0, 12 - n_sheets)
    months = _MONTHS[start : start + n_sheets]
    summary = rng.choice(["Summary", "Totals", "Year Summary"])
    col = layout.col(target.header)
    data = range_ref(layout.first, col, layout.last, col)
    out = range_ref(2, 2, 1 + n_sheets, 2)
    text = pick(
        rng, _CROSS, summary=summary, span=out, header=target.header, months=", ".join(months)
    )
    formulas = [[f"=SUM({sheet_prefix(m)}{data})"] for m in months]
    cases = []
    for _ in range(n_cases):
        book = Book()
        sums = []
        book.write_table(
            summary, 1, 1, ["Month", f"Total {target.header}"], [[m, None] for m in months]
        )
        for month in months:
            rows = layout.rows(rng)
            sheet_layout = Layout(month, layout.domain, layout.columns, layout.top, layout.n_rows)
            book.sheets[month] = table_book(sheet_layout, rows).sheets[month]
            sums.append(sum(r[layout.pos(target.header)] for r in rows))
        answer = book.copy()
        for i, total in enumerate(sums):
            answer.sheet(summary)[(2 + i, 2)] = total
        calls = [write_call(f"{sheet_prefix(summary)}{out}", formulas)]
        cases.append(CaseSpec(book, answer, calls))
    return TaskSpec(text, CELL_LEVEL, f"{sheet_prefix(summary)}{out}", cases, {"sheets": months})


FAMILIES = [
    Family(
        "column_sum",
        CELL_LEVEL,
        ("easy", "medium", "hard"),
        "SUM of a column into a cell",
        _aggregate(("SUM",)),
    ),
    Family(
        "column_average",
        CELL_LEVEL,
        ("easy", "medium", "hard"),
        "AVERAGE of a column into a cell",
        _aggregate(("AVERAGE",)),
    ),
    Family(
        "column_extreme",
        CELL_LEVEL,
        ("easy", "medium", "hard"),
        "MAX or MIN of a column into a cell",
        _aggregate(("MAX", "MIN")),
    ),
    Family(
        "column_count",
        CELL_LEVEL,
        ("easy", "medium", "hard"),
        "COUNT of the filled numbers of a column",
        _aggregate(("COUNT",)),
    ),
    Family(
        "conditional_aggregate",
        CELL_LEVEL,
        ("easy", "medium", "hard"),
        "SUMIF / COUNTIF / AVERAGEIF (SUMIFS when hard)",
        _conditional,
    ),
    Family(
        "cross_sheet_total",
        CELL_LEVEL,
        ("medium", "hard"),
        "a summary sheet totalling a column of several sheets",
        _cross_sheet,
    ),
]

"""The reading tools of the spreadsheet-rl preset: inspect_range, list_sheets, find_cells."""

from __future__ import annotations

import re
from typing import Any

from openpyxl.worksheet.cell_range import CellRange as OpenpyxlRange
from openpyxl.worksheet.worksheet import Worksheet

from spreadrl.env.spreadsheet.recalc.errors import ERROR_VALUES
from spreadrl.env.spreadsheet.tools.base import ToolContext
from spreadrl.env.spreadsheet.tools.common import nonempty_cells
from spreadrl.env.spreadsheet.tools.srl.address import (
    address,
    computed_values,
    is_formula,
    qualify,
    split_ranges,
)
from spreadrl.env.spreadsheet.tools.srl.arguments import SrlArgs
from spreadrl.env.spreadsheet.tools.srl.replies import (
    INSPECT_RESPONSE_CHARS,
    MAX_RESPONSE_CHARS,
    WORKBOOK,
    SrlError,
    dumps,
    fit,
    jsonable,
)
from spreadrl.env.spreadsheet.workbook import (
    MAX_ROW,
    CellRange,
    column_letter,
    quote_sheet,
    render_value,
)

INSPECT_MAX_CELLS = 400  # records per range in cells mode
SUMMARY_MAX_CELLS = 100_000
MAX_RANGES = 20
FIND_DEFAULT_RESULTS = 20


def inspect_range(ctx: ToolContext, a: SrlArgs) -> str:
    mode = a.mode or "cells"
    if mode == "summary" and a.include_details:
        raise SrlError("invalid_arguments", "include_details is incompatible with mode=summary.")
    texts = split_ranges(a.range) if isinstance(a.range, str) else []
    if len(texts) > MAX_RANGES:
        raise SrlError("too_many_ranges", f"at most {MAX_RANGES} ranges per call.")
    targets = [ctx.book.parse_range(qualify(ctx, t, a.sheet_name), clip=True) for t in texts]
    if mode == "summary":
        scanned = sum(t.size for t in targets)
        if scanned > SUMMARY_MAX_CELLS:
            raise SrlError(
                "summary_range_too_large",
                f"summary scans at most {SUMMARY_MAX_CELLS} cells per call; these ranges hold "
                f"{scanned}",
            )
        return fit(
            {"status": "success", "file": WORKBOOK, "mode": "summary", "ranges": [
                _summary(ctx, t) for t in targets
            ], "truncated": False},
            INSPECT_RESPONSE_CHARS,
            (),
        )  # fmt: skip
    computed = None
    blocks = []
    for target in targets:
        ws = ctx.book.wb[target.sheet]
        cells = nonempty_cells(ws, target)
        if computed is None and any(is_formula(v) for _, _, v in cells):
            computed = computed_values(ctx) or {}
        sheet_values = (computed or {}).get(target.sheet, {})
        records = []
        for r, c, value in cells[:INSPECT_MAX_CELLS]:
            record: dict[str, Any] = {"address": f"{column_letter(c)}{r}"}
            if is_formula(value):
                record["value"] = jsonable(sheet_values.get((r, c)))
                record["formula"] = value
            else:
                record["value"] = jsonable(value)
            if a.include_details:
                record.update(_details(ws, r, c))
            records.append(record)
        block: dict[str, Any] = {
            "range": target.a1(),
            "non_empty_cells": len(cells),
            "cells": records,
        }
        if a.include_details:
            merged = [str(m) for m in ws.merged_cells.ranges if _overlaps(m, target)]
            if merged:
                block["merged_ranges"] = merged
        if len(cells) > len(records):
            block["omitted_cells"] = len(cells) - len(records)
            r, c, _ = cells[len(records)]
            block["omitted_from"] = f"{column_letter(c)}{r}"
        blocks.append(block)
    payload = {"status": "success", "file": WORKBOOK, "mode": "cells", "ranges": blocks}
    payload["truncated"] = any("omitted_from" in b for b in blocks)
    text = dumps(payload)
    if len(text) <= INSPECT_RESPONSE_CHARS:
        return text
    return _fit_cells(payload, blocks)


def _fit_cells(payload: dict[str, Any], blocks: list[dict[str, Any]]) -> str:
    """Cut the records of the last ranges first, and say where each cut range continues."""
    payload["truncated"] = payload["response_truncated"] = True
    for block in reversed(blocks):
        records = block["cells"]
        lo, hi = 0, len(records)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            block["cells"] = records[:mid]
            if len(dumps(payload)) <= INSPECT_RESPONSE_CHARS:
                lo = mid
            else:
                hi = mid - 1
        block["cells"] = records[:lo]
        if lo < len(records):
            block["omitted_cells"] = block["non_empty_cells"] - lo
            block["omitted_from"] = records[lo]["address"]
        if len(dumps(payload)) <= INSPECT_RESPONSE_CHARS:
            return dumps(payload)
    return dumps({"status": "success", "truncated": True, "response_truncated": True})


def _overlaps(merged: OpenpyxlRange, target: CellRange) -> bool:
    return not (
        merged.max_row < target.min_row
        or merged.min_row > target.max_row
        or merged.max_col < target.min_col
        or merged.min_col > target.max_col
    )


def _details(ws: Worksheet, row: int, col: int) -> dict[str, Any]:
    cell = ws.cell(row, col)
    out: dict[str, Any] = {}
    if cell.number_format and cell.number_format != "General":
        out["number_format"] = cell.number_format
    style = {}
    if cell.font is not None:
        if cell.font.b:
            style["bold"] = True
        if cell.font.i:
            style["italic"] = True
        if cell.font.u:
            style["underline"] = True
    fill = getattr(cell.fill, "fgColor", None)
    if getattr(cell.fill, "fill_type", None) and isinstance(getattr(fill, "rgb", None), str):
        style["fill_color"] = fill.rgb
    if cell.alignment is not None and cell.alignment.horizontal:
        style["horizontal_alignment"] = cell.alignment.horizontal
    if style:
        out["style"] = style
    return out


def _summary(ctx: ToolContext, target: CellRange) -> dict[str, Any]:
    cells = nonempty_cells(ctx.book.wb[target.sheet], target)
    formulas = [(r, c) for r, c, v in cells if is_formula(v)]
    errors = sum(1 for _, _, v in cells if isinstance(v, str) and v in ERROR_VALUES)
    if formulas:
        values = (computed_values(ctx) or {}).get(target.sheet, {})
        errors += sum(1 for rc in formulas if values.get(rc) in ERROR_VALUES)
    return {
        "range": target.a1(),
        "cells": target.size,
        "non_empty": len(cells),
        "empty": target.size - len(cells),
        "formulas": len(formulas),
        "errors": errors,
        "non_empty_fraction": round(len(cells) / target.size, 4),
    }


def list_sheets(ctx: ToolContext, a: SrlArgs) -> str:
    wb = ctx.book.wb
    active = wb.worksheets.index(wb.active) if wb.active in wb.worksheets else None
    sheets = []
    for i, ws in enumerate(wb.worksheets):
        rows, cols = ctx.book.dimensions(ws.title)
        sheets.append({
            "name": ws.title,
            "index": i,
            "dimensions": f"A1:{column_letter(max(cols, 1))}{max(rows, 1)}",
            "max_row": max(rows, 1),
            "max_col": max(cols, 1),
            "state": ws.sheet_state,
            "hidden": ws.sheet_state != "visible",
            "active": i == active,
        })  # fmt: skip
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "active_sheet": wb.worksheets[active].title if active is not None else None,
        "active_index": active,
        "sheet_count": len(sheets),
        "returned_sheets": len(sheets),
        "truncated": False,
        "sheets": sheets,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ("sheets",))


_UNSUPPORTED_REGEX = re.compile(r"(?<!\\)[()|+?]|(?<!\\)\{\d*,?\d*\}")


def find_cells(ctx: ToolContext, a: SrlArgs) -> str:
    query = a.query
    if not query:
        raise SrlError("invalid_query", "query is empty; it cannot find blank cells.")
    match, search_in = a.match or "contains", a.search_in or "values"
    flags = 0 if a.case_sensitive else re.IGNORECASE
    if match == "regex":
        if _UNSUPPORTED_REGEX.search(query):
            raise SrlError(
                "unsupported_regex", "regex may not use groups, alternation, +, ? or {m,n}."
            )
        try:
            pattern = re.compile(query, flags)
        except re.error as exc:
            raise SrlError("invalid_regex", f"invalid regex: {exc}") from None
    else:
        escaped = re.escape(query)
        body = {"contains": escaped, "equals": f"^{escaped}$", "prefix": f"^{escaped}"}[match]
        pattern = re.compile(body, flags | re.DOTALL)
    everything = (a.return_ or "first") == "all"
    limit = a.max_results if a.max_results is not None else FIND_DEFAULT_RESULTS
    if everything and not 1 <= limit <= ctx.config.max_find_results:
        raise SrlError("invalid_arguments", f"max_results must be 1-{ctx.config.max_find_results}.")
    limit = limit if everything else 1
    book = ctx.book
    if a.range:
        targets = [book.parse_range(qualify(ctx, a.range, a.sheet_name), clip=True)]
    else:
        names = [book.sheet_name(a.sheet_name)] if a.sheet_name else book.wb.sheetnames
        targets = [book.parse_range(f"{quote_sheet(n)}!A1:XFD{MAX_ROW}", clip=True) for n in names]
    computed: dict[str, Any] | None = None
    matches: list[dict[str, Any]] = []
    total = 0
    for target in targets:
        for r, c, raw in nonempty_cells(book.wb[target.sheet], target):
            formula = raw if is_formula(raw) else None
            value = raw
            if formula is not None and search_in != "formulas":
                if computed is None:
                    computed = computed_values(ctx) or {}
                value = computed.get(target.sheet, {}).get((r, c))
            texts = []
            if search_in in ("values", "both") and value is not None:
                texts.append(value if isinstance(value, str) else render_value(value))
            if search_in in ("formulas", "both") and formula is not None:
                texts.append(formula)
            if not any(pattern.search(t) for t in texts):
                continue
            total += 1
            if len(matches) < limit:
                record: dict[str, Any] = {"address": address(target.sheet, r, c)}
                if a.include_values:
                    if search_in in ("values", "both"):
                        record["value"] = jsonable(value)
                    if search_in in ("formulas", "both"):
                        record["formula"] = formula
                matches.append(record)
    columns = ["address"]
    if a.include_values:
        columns += [k for k in ("value", "formula") if search_in in (k + "s", "both")]
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "query": query,
        "total_matches": total,
        "returned": len(matches),
        "result_truncated": total > len(matches),
        "include_values": bool(a.include_values),
        "matches_csv": _csv(matches, columns),
        "truncated": total > len(matches),
    }
    return _fit_csv(payload, matches, columns)


def _csv(records: list[dict[str, Any]], columns: list[str]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow(
            ["" if record.get(k) is None else record.get(k) for k in columns]
        )  # fmt: skip
    return out.getvalue().rstrip("\n")


def _fit_csv(payload: dict[str, Any], matches: list[dict[str, Any]], columns: list[str]) -> str:
    keep = len(matches)
    while len(dumps(payload)) > MAX_RESPONSE_CHARS and keep > 1:
        keep //= 2
        payload.update(matches_csv=_csv(matches[:keep], columns), returned=keep)
        payload["truncated"] = payload["response_truncated"] = True
    if len(dumps(payload)) > MAX_RESPONSE_CHARS:
        return dumps({"status": "success", "total_matches": payload["total_matches"],
                      "truncated": True, "response_truncated": True})  # fmt: skip
    return dumps(payload)

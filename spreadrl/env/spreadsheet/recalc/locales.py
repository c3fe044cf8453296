"""The recalculation locale: the language Excel rendered TEXT and number formats in.

Excel renders ``TEXT(d,"mmm")`` in the locale of the machine that saves the file:
``Jun`` on an English Windows, ``6月`` on a Chinese one. The formula is the same, so
no engine can tell from the file which one the answer's author had; ``env.locale``
(``check --locale``) says it, and ``auto`` reads it from the answer's own cached
text results (:func:`infer_locale`).

The locale is a property of a whole recalculation (every engine the hybrid runs
must use the same), so it travels as a context variable (:func:`recalc_locale`)
rather than as an argument of every engine call. What each engine supports:

- **LibreOffice** renders in any locale it has locale data for (all of
  :data:`LOCALES`); the locale is set in the profile of the soffice that
  recalculates (``ooSetupSystemLocale``), one soffice per locale.
- **IronCalc** has six locales (``ironcalc.get_supported_locales()``: en, en-GB, de,
  fr, es, it). Its locale also changes how it parses typed formulas (``;`` and
  decimal commas), which the hybrid's rewrites rely on, so the hybrid keeps IronCalc
  in ``en`` and sends every locale-dependent cell to LibreOffice in the asked
  locale; ``--engine ironcalc`` alone uses IronCalc's own locale and refuses one it
  lacks.
"""

from __future__ import annotations

import contextlib
import re
import zipfile
from collections.abc import Iterator
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

from spreadrl.archive_gate import check_archive
from spreadrl.errors import ConfigError

DEFAULT_LOCALE = "en-US"
AUTO = "auto"
LOCALES: dict[str, str | None] = {
    "en-US": "en",
    "en-GB": "en-GB",
    "de-DE": "de",
    "fr-FR": "fr",
    "es-ES": "es",
    "it-IT": "it",
    "zh-CN": None,
    "ja-JP": None,
}
"""Locale -> IronCalc's name for it (None: IronCalc has none; LibreOffice renders it)."""

_CURRENT: ContextVar[str] = ContextVar("spreadrl_recalc_locale", default=DEFAULT_LOCALE)


def check_locale_name(name: str, where: str, *, allow_auto: bool = True) -> None:
    """Raise a ConfigError naming ``where`` unless ``name`` is a locale spreadrl renders."""
    known = [*LOCALES, AUTO] if allow_auto else list(LOCALES)
    if name not in known:
        raise ConfigError(f"{where} {name!r}: unknown locale; choose one of {', '.join(known)}")


def current_locale() -> str:
    """The locale of the recalculation running in this context (``en-US`` unless set)."""
    return _CURRENT.get()


@contextlib.contextmanager
def recalc_locale(locale: str) -> Iterator[str]:
    """Recalculate in ``locale`` inside the block (every engine, every workbook)."""
    check_locale_name(locale, "locale", allow_auto=False)
    token = _CURRENT.set(locale)
    try:
        yield locale
    finally:
        _CURRENT.reset(token)


def ironcalc_locale(locale: str) -> str | None:
    """IronCalc's name of ``locale``, or None where IronCalc has none."""
    return LOCALES.get(locale)


# -------------------------------------------------------------- inferring it

_TEXT_CALL = re.compile(rb"<(?:\w+:)?f\b[^>]*>[^<]*\bTEXT\(", re.IGNORECASE)
_CELL = re.compile(
    rb"<(?:\w+:)?c\b[^>]*\bt=\"str\"[^>]*>\s*<(?:\w+:)?f\b[^>]*>([^<]*)</(?:\w+:)?f>\s*"
    rb"<(?:\w+:)?v>([^<]*)</(?:\w+:)?v>"
)
_CJK_ZH = re.compile(
    r"(?:^|\d)月$|^[一二三四五六七八九十]+月$|星期|^周[一二三四五六日]$|^[一二三四五六日]$"
)
_CJK_JA = re.compile(r"曜日|^[月火水木金土日]$")


@lru_cache(maxsize=1)
def _latin_names() -> dict[str, set[str]]:
    """Locale -> its month and day names (full and short), as IronCalc renders them."""
    import ironcalc

    formats = ("mmm", "mmmm", "ddd", "dddd")
    names: dict[str, set[str]] = {}
    for locale, engine_locale in LOCALES.items():
        if engine_locale is None:
            continue
        model = ironcalc.create("names", engine_locale, "UTC")
        row = 1
        for month in range(1, 13):
            for fmt in formats:
                # typed formulas parse in the model's locale: build them without separators
                model.set_user_input(0, row, 1, f"{45292 + 31 * (month - 1) + month}")
                model.set_user_input(0, row, 2, fmt)
                model.set_user_input(0, row, 3, f"=TEXT(A{row}{_sep(engine_locale)}B{row})")
                row += 1
        model.evaluate()
        names[locale] = {str(model.get_cell_value(0, r, 3)).casefold() for r in range(1, row)} - {
            ""
        }
    return names


def _sep(engine_locale: str) -> str:
    return "," if engine_locale in ("en", "en-GB") else ";"


def _votes(text: str) -> set[str]:
    """The locales whose month or day names ``text`` uses."""
    text = text.strip()
    if _CJK_JA.search(text):
        return {"ja-JP"}
    if _CJK_ZH.search(text):
        return {"zh-CN"}
    words = {w.casefold() for w in re.findall(r"[^\W\d_]+\.?", text)}
    return {loc for loc, names in _latin_names().items() if words & names}


def cached_text_results(path: Path) -> list[str]:
    """The cached values of the TEXT formulas of ``path`` (read from the sheet XML)."""
    found: list[str] = []
    check_archive(path)
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
                continue
            data = archive.read(name)
            if not _TEXT_CALL.search(data):
                continue
            for formula, value in _CELL.findall(data):
                if b"TEXT(" in formula.upper() and value:
                    found.append(value.decode("utf-8", "replace"))
    return found


def infer_locale(path: Path) -> str | None:
    """The locale the answer's cached TEXT results were rendered in, or None when they say nothing.

    Each cached result votes for the locales whose month or day names it uses
    (``6月`` for zh-CN; ``Jun`` for en-US, and for de-DE, whose short June is the
    same). The locale with most votes wins; ties go to the one listed first in
    :data:`LOCALES` (en-US first). Results without names (numbers, ``yyyy-mm-dd``)
    do not vote.
    """
    tally: dict[str, int] = {}
    for text in cached_text_results(Path(path)):
        for locale in _votes(text):
            tally[locale] = tally.get(locale, 0) + 1
    if not tally:
        return None
    order = list(LOCALES)
    return max(tally, key=lambda loc: (tally[loc], -order.index(loc)))

"""Realistic seeded tables (sales, staff, inventory, expenses, grades) for the families.

A :class:`Domain` is a list of columns, each a header and a value kind; a family
picks a domain and a row count once per task (so the instruction holds for every
case) and calls :func:`make_rows` once per case for fresh values.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Any

from spreadrl.data.synth.base import Book, CellValue

REGIONS = ["North", "South", "East", "West", "Central"]
PRODUCTS = [
    "Laptop",
    "Monitor",
    "Keyboard",
    "Mouse",
    "Printer",
    "Tablet",
    "Headset",
    "Webcam",
    "Router",
    "Desk Lamp",
    "Office Chair",
    "Scanner",
]
DEPARTMENTS = ["Sales", "Finance", "Engineering", "Marketing", "Support", "HR"]
CATEGORIES = ["Hardware", "Software", "Furniture", "Supplies", "Services"]
VENDORS = ["Acme Corp", "Globex", "Initech", "Umbrella Ltd", "Stark Supply", "Wayne Trading"]
EXPENSE_TYPES = ["Travel", "Meals", "Office", "Software", "Training"]
CLASSES = ["Math", "Physics", "History", "Biology", "Art"]
FIRST = [
    "Alice",
    "Bob",
    "Carla",
    "David",
    "Emma",
    "Frank",
    "Grace",
    "Hiro",
    "Ines",
    "Jamal",
    "Kate",
    "Liam",
    "Maria",
    "Nina",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tara",
    "Umar",
    "Vera",
    "Wen",
    "Yusuf",
    "Zoe",
]
LAST = [
    "Smith",
    "Garcia",
    "Chen",
    "Novak",
    "Okafor",
    "Muller",
    "Rossi",
    "Khan",
    "Silva",
    "Brown",
    "Tanaka",
    "Dubois",
    "Kowalski",
    "Larsen",
    "Haddad",
    "Ivanova",
]


@dataclass(frozen=True)
class Column:
    """A header and how its values are drawn: kind in text/name/id/int/money/date."""

    header: str
    kind: str
    pool: tuple[Any, ...] = ()
    low: float = 0
    high: float = 0


@dataclass(frozen=True)
class Domain:
    name: str
    sheet: str  # a realistic sheet name for medium/hard tasks
    columns: tuple[Column, ...]

    def index(self, header: str) -> int:
        return [c.header for c in self.columns].index(header)

    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def of_kind(self, *kinds: str) -> list[Column]:
        return [c for c in self.columns if c.kind in kinds]


def _c(header: str, kind: str, pool: list[Any] | None = None, low: float = 0, high: float = 0):
    return Column(header, kind, tuple(pool or ()), low, high)


DOMAINS = {
    "sales": Domain(
        "sales",
        "Sales Data",
        (
            _c("Order ID", "id", ["SO-"]),
            _c("Date", "date", [2023]),
            _c("Region", "text", REGIONS),
            _c("Product", "text", PRODUCTS),
            _c("Units", "int", low=1, high=120),
            _c("Revenue", "money", low=50, high=9000),
        ),
    ),
    "staff": Domain(
        "staff",
        "Employees",
        (
            _c("Employee ID", "id", ["E"]),
            _c("Name", "name"),
            _c("Department", "text", DEPARTMENTS),
            _c("Hire Date", "date", [2015]),
            _c("Salary", "int", low=32000, high=150000),
            _c("Bonus", "money", low=0, high=6000),
        ),
    ),
    "inventory": Domain(
        "inventory",
        "Inventory",
        (
            _c("SKU", "id", ["SKU-"]),
            _c("Item", "text", PRODUCTS),
            _c("Category", "text", CATEGORIES),
            _c("Stock", "int", low=0, high=900),
            _c("Unit Cost", "money", low=2, high=800),
        ),
    ),
    "expenses": Domain(
        "expenses",
        "Expense Log",
        (
            _c("Receipt", "id", ["R"]),
            _c("Date", "date", [2024]),
            _c("Type", "text", EXPENSE_TYPES),
            _c("Vendor", "text", VENDORS),
            _c("Amount", "money", low=5, high=2500),
        ),
    ),
    "grades": Domain(
        "grades",
        "Grades",
        (
            _c("Student ID", "id", ["S"]),
            _c("Student", "name"),
            _c("Class", "text", CLASSES),
            _c("Score", "int", low=35, high=100),
            _c("Credits", "int", low=1, high=6),
        ),
    ),
}


def draw(rng: random.Random, column: Column, serial: int) -> CellValue:
    """One value of ``column``; ``serial`` makes ids unique within a table."""
    if column.kind == "text":
        return rng.choice(column.pool)
    if column.kind == "name":
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if column.kind == "id":
        return f"{column.pool[0]}{serial:04d}"
    if column.kind == "int":
        return rng.randint(int(column.low), int(column.high))
    if column.kind == "money":
        return rng.randint(int(column.low * 100), int(column.high * 100)) / 100
    if column.kind == "date":
        start = dt.datetime(int(column.pool[0]), 1, 1)
        return start + dt.timedelta(days=rng.randint(0, 700))
    raise ValueError(f"unknown column kind {column.kind!r}")


def make_rows(rng: random.Random, domain: Domain, n_rows: int) -> list[list[Any]]:
    """``n_rows`` rows of ``domain``; ids increase from a random start and never repeat."""
    start = rng.randint(100, 8000)
    serials = sorted(rng.sample(range(start, start + 4 * n_rows), n_rows))
    return [[draw(rng, col, serials[i]) for col in domain.columns] for i in range(n_rows)]


@dataclass(frozen=True)
class Layout:
    """Where a task's table sits; fixed per task so one instruction fits every case."""

    sheet: str
    domain: Domain
    columns: tuple[Column, ...]
    top: int  # header row
    n_rows: int
    left: int = 1
    title: str = ""  # an optional report title two rows above the header

    @property
    def first(self) -> int:
        return self.top + 1

    @property
    def last(self) -> int:
        return self.top + self.n_rows

    @property
    def width(self) -> int:
        return len(self.columns)

    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def pos(self, header: str) -> int:
        """0-based position of ``header`` in the table."""
        return self.headers().index(header)

    def col(self, header: str) -> int:
        """Worksheet column number of ``header``."""
        return self.left + self.pos(header)

    def rows(self, rng: random.Random) -> list[list[Any]]:
        full = make_rows(rng, self.domain, self.n_rows)
        keep = [self.domain.index(c.header) for c in self.columns]
        return [[row[i] for i in keep] for row in full]


def choose_layout(
    rng: random.Random,
    difficulty: str,
    *,
    needs: tuple[str, ...] = ("int", "money"),
    domains: tuple[str, ...] = tuple(DOMAINS),
    rows: dict[str, tuple[int, int]] | None = None,
) -> tuple[Layout, Column]:
    """A layout plus one column of a kind in ``needs`` that the task is about.

    easy: "Sheet1", 2-3 columns, 5-12 rows; medium: the domain's sheet name, all
    columns, 8-25 rows; hard: all columns under a title row, 15-40 rows.
    """
    sizes = {"easy": (5, 12), "medium": (8, 25), "hard": (15, 40)}
    sizes.update(rows or {})
    domain = DOMAINS[rng.choice([d for d in domains if DOMAINS[d].of_kind(*needs)])]
    target = rng.choice(domain.of_kind(*needs))
    n_rows = rng.randint(*sizes[difficulty])
    if difficulty == "easy":
        others = [c for c in domain.columns if c is not target and c.kind in ("text", "name", "id")]
        label = rng.choice(others) if others else None
        cols = tuple(c for c in domain.columns if c is target or c is label)
        return Layout("Sheet1", domain, cols, rng.randint(1, 3), n_rows), target
    if difficulty == "medium":
        return Layout(domain.sheet, domain, domain.columns, 1, n_rows), target
    title = f"{domain.sheet} report {rng.choice(['Q1', 'Q2', 'Q3', 'Q4', 'FY'])} {rng.randint(2021, 2025)}"
    return Layout(domain.sheet, domain, domain.columns, 3, n_rows, title=title), target


def table_book(layout: Layout, rows: list[list[CellValue]]) -> Book:
    """A Book holding the layout's table (and title) filled with ``rows``."""
    book = Book()
    if layout.title:
        book.sheet(layout.sheet)[(layout.top - 2, layout.left)] = layout.title
    book.write_table(layout.sheet, layout.top, layout.left, layout.headers(), rows)
    return book

"""spreadrl's Spreadsheet Gym as an OpenEnv environment: the light client (openenv only)."""

from .client import SpreadsheetEnv

__all__ = ["SpreadsheetEnv"]

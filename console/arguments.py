"""Whole-number arguments checked where they are parsed: a value out of range is a one-line usage error
(exit 2), not an OverflowError from the database driver or a server listening elsewhere."""

from __future__ import annotations

import argparse
from collections.abc import Callable

LARGEST_ROW_NUMBER = 2**63 - 1
"""The largest integer a database column or LIMIT holds (SQLite's INTEGER, PostgreSQL's BIGINT)."""
LARGEST_PORT = 65_535


def whole_number(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse `type`: a whole number from `low` to `high`, else an error naming the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be from {low} to {high}, not {text}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


row_limit = whole_number(1, LARGEST_ROW_NUMBER, "a number of rows")
row_id = whole_number(1, LARGEST_ROW_NUMBER, "an id")
port_number = whole_number(1, LARGEST_PORT, "a port")

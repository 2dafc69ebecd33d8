"""The history of live sessions and file jobs (SQLite with migrations); no Qt."""

from .db import (
    STATUSES,
    UNFINISHED,
    Item,
    ItemNotFoundError,
    Library,
    LibraryError,
    options_key,
)

__all__ = [
    "STATUSES",
    "UNFINISHED",
    "Item",
    "ItemNotFoundError",
    "Library",
    "LibraryError",
    "options_key",
]

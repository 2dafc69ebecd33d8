"""Transcript data model, its JSON round-trip, and exporters (TXT, SRT, VTT, JSON, MD, CSV, DOCX)."""

from .export import FORMATS, ExportExistsError, export, format_clock, format_timestamp, render
from .model import FORMAT_NAME, FORMAT_VERSION, Segment, Transcript, Word

__all__ = [
    "FORMATS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ExportExistsError",
    "Segment",
    "Transcript",
    "Word",
    "export",
    "format_clock",
    "format_timestamp",
    "render",
]

"""Transcript data model, its JSON round-trip, and exporters (TXT, SRT, VTT, JSON, MD, CSV, DOCX, RTTM)."""

from .export import FORMATS, ExportExistsError, export, format_clock, format_timestamp, render
from .model import FORMAT_NAME, FORMAT_VERSION, Segment, SpeakerTurn, Transcript, Word

__all__ = [
    "FORMATS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ExportExistsError",
    "Segment",
    "SpeakerTurn",
    "Transcript",
    "Word",
    "export",
    "format_clock",
    "format_timestamp",
    "render",
]

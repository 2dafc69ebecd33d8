"""Transcript data model, its JSON round-trip, and exporters (TXT, SRT, VTT, JSON, MD, CSV, DOCX, RTTM)."""

from .edits import (
    Edit,
    EditHistory,
    EditText,
    JoinSegments,
    MergeSpeakers,
    RenameSpeaker,
    Replace,
    SetSpeaker,
    SetWordsSpeaker,
    SplitSegment,
    SplitSegmentAt,
    new_speaker_id,
)
from .export import FORMATS, ExportExistsError, export, format_clock, format_timestamp, render
from .model import FORMAT_NAME, FORMAT_VERSION, Segment, SpeakerTurn, Transcript, Word
from .subtitles import Cue, SubtitleRules, cues

__all__ = [
    "FORMATS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Cue",
    "Edit",
    "EditHistory",
    "EditText",
    "ExportExistsError",
    "JoinSegments",
    "MergeSpeakers",
    "RenameSpeaker",
    "Replace",
    "Segment",
    "SetSpeaker",
    "SetWordsSpeaker",
    "SpeakerTurn",
    "SplitSegment",
    "SplitSegmentAt",
    "SubtitleRules",
    "Transcript",
    "Word",
    "cues",
    "export",
    "format_clock",
    "format_timestamp",
    "new_speaker_id",
    "render",
]

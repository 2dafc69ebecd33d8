"""Live transcription sessions (see ``session``): no Qt, shared by the window and the CLI."""

from .events import (
    Event,
    EventQueue,
    Levels,
    LiveState,
    Problem,
    Started,
    Stopped,
    TextUpdate,
)
from .refine import REFINE_MAX_SECONDS
from .session import LiveOptions, LiveSession

__all__ = [
    "REFINE_MAX_SECONDS",
    "Event",
    "EventQueue",
    "Levels",
    "LiveOptions",
    "LiveSession",
    "LiveState",
    "Problem",
    "Started",
    "Stopped",
    "TextUpdate",
]

"""Live transcription sessions (see ``session``): no Qt, shared by the window and the CLI."""

from .events import (
    Adapted,
    Event,
    EventQueue,
    HealthReport,
    Levels,
    LiveState,
    Problem,
    Relabelled,
    Started,
    Stopped,
    TextUpdate,
)
from .health import Health
from .refine import REFINE_MAX_SECONDS
from .session import LiveOptions, LiveSession

__all__ = [
    "REFINE_MAX_SECONDS",
    "Adapted",
    "Event",
    "EventQueue",
    "Health",
    "HealthReport",
    "Levels",
    "LiveOptions",
    "LiveSession",
    "LiveState",
    "Problem",
    "Relabelled",
    "Started",
    "Stopped",
    "TextUpdate",
]

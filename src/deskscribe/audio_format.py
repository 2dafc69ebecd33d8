"""16 kHz mono float32 is what every layer's audio is.

Decoding, capture, VAD, Whisper's features and the speaker models all take and give audio at
this one rate; every module that needs the number imports it from here.
"""

from __future__ import annotations

SAMPLE_RATE = 16000

"""16 kHz mono float32 is what every layer's audio is.

Decoding, capture, VAD, Whisper's features and the speaker models all take and give audio at
this one rate; every module that needs the number imports it from here. Its level, as the
capture paths report it, is measured here too.
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000
SILENCE_DB = -100.0  # level reported for digital silence and for no signal at all


def level_db(audio: np.ndarray) -> float:
    """RMS level in dBFS (a full-scale sine is -3), `SILENCE_DB` at most."""
    if len(audio) == 0:
        return SILENCE_DB
    power = float(np.mean(np.square(audio, dtype=np.float64)))
    return max(SILENCE_DB, 10.0 * float(np.log10(max(power, 1e-30))))

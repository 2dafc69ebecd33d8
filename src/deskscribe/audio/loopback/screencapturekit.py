"""macOS 13+ system audio: an audio-only ScreenCaptureKit stream through pyobjc.

NEVER RUN ON macOS YET: there is no Mac here. It is written against pyobjc 12's metadata
for ScreenCaptureKit, CoreMedia and libdispatch (selector names and argument conventions
checked in those wheels), Apple's documentation and what peers' bugs report; the parts that
do not touch macOS (the sample layout in `formats.float_frames`, device choice and the help
texts in `macos`) are tested on Linux. On any failure here the user gets a message naming
BlackHole, which stays the fallback.

How it works: `SCShareableContent` gives the displays (this fails, with Apple's "declined
TCC" error, while Screen Recording permission is missing: that error is turned into the
steps to grant it); a filter on the first display, a configuration that captures audio
(48 kHz stereo, this process's own sound excluded) with the smallest video ScreenCaptureKit
allows; an `SCStreamOutput` on a serial dispatch queue hands each audio sample buffer's
float32 samples (planar, one channel after the other, as ScreenCaptureKit delivers them
unless told otherwise) to `LoopbackStream._push`. ScreenCaptureKit sends nothing while
nothing plays: `GapFiller` fills that time, as for WASAPI.

Whether something plays (for `SilenceWatch`) is not asked of Core Audio: a device "running
somewhere" is often an app holding it open in silence, and a false "permission missing"
is worse than none. The permission error comes from `SCShareableContent` instead.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, NamedTuple

from ..device_types import CaptureDeviceError, InputDevice
from . import LoopbackStream, importable, native_device
from .formats import float_frames
from .silence import permission_help

BACKEND = "screencapturekit"
RATE = 48000
CHANNELS = 2
IS_FLOAT = 1 << 0  # kAudioFormatFlagIsFloat
NON_INTERLEAVED = 1 << 5  # kAudioFormatFlagIsNonInterleaved
WAIT_S = 10.0  # for ScreenCaptureKit's completion handlers


def frameworks() -> tuple[Any, Any, Any]:
    """(ScreenCaptureKit, CoreMedia, dispatch) from pyobjc; a clear error when missing."""
    try:
        import CoreMedia
        import dispatch
        import ScreenCaptureKit
    except ImportError:
        raise CaptureDeviceError(
            "Recording what this Mac plays needs pyobjc's ScreenCaptureKit, CoreMedia and "
            "libdispatch packages, which this installation lacks (installing DeskScribe "
            "with pip on macOS installs them), or BlackHole."
        ) from None
    return ScreenCaptureKit, CoreMedia, dispatch


def available() -> bool:
    return importable(frameworks)


def device() -> InputDevice:
    return native_device(
        "What this Mac plays (ScreenCaptureKit)", RATE, BACKEND, ScreenCaptureKitStream, CHANNELS
    )


class StreamFormat(NamedTuple):
    rate: float
    flags: int
    channels: int
    bits: int


def stream_format(asbd) -> StreamFormat:
    """An AudioStreamBasicDescription as pyobjc returns it: a struct with field names where
    pyobjc-framework-CoreAudio registered the type, else a plain tuple in the C order
    (mSampleRate, mFormatID, mFormatFlags, mBytesPerPacket, mFramesPerPacket,
    mBytesPerFrame, mChannelsPerFrame, mBitsPerChannel, mReserved)."""
    if hasattr(asbd, "mSampleRate"):
        fields = (asbd.mSampleRate, asbd.mFormatFlags, asbd.mChannelsPerFrame, asbd.mBitsPerChannel)
    else:
        fields = (asbd[0], asbd[2], asbd[6], asbd[7])
    rate, flags, channels, bits = fields
    return StreamFormat(float(rate), int(flags), int(channels), int(bits))


def layout_problem(fmt: StreamFormat, length: int, frames: int, rate: float) -> str | None:
    """Why a buffer of ``length`` bytes holding ``frames`` frames in ``fmt`` cannot be read as
    float32 at ``rate`` (None: it can). Guessing would record noise or the wrong pitch."""
    if fmt.rate != rate:
        return f"{fmt.rate:.0f} Hz, not the {rate:.0f} Hz asked for"
    if not fmt.flags & IS_FLOAT or fmt.bits != 32:
        return f"{fmt.bits}-bit samples (flags {fmt.flags:#x}), not 32-bit float"
    if fmt.channels < 1 or length != frames * fmt.channels * 4:
        return f"{length} bytes for {frames} frames of {fmt.channels} channel(s)"
    return None


def layout_message(problem: str, instead: str) -> str:
    """The error of a stream whose buffers come in a layout it cannot read."""
    return (
        f"macOS sent system audio as {problem}. Record system audio through {instead}, and "
        "please report this."
    )


def failure_message(error: Exception, instead: str) -> str:
    """The error of a stream whose buffer handler failed."""
    return (
        f"System audio from macOS could not be read ({error}). Your recording so far is kept; "
        f"record system audio through {instead}, and please report this."
    )


def _completed(start, what: str) -> tuple:
    """Call ``start(handler)`` and wait for ScreenCaptureKit to call the handler; its
    arguments. CaptureDeviceError when it does not within WAIT_S."""
    done = threading.Event()
    got: list[tuple] = []

    def handler(*args) -> None:
        got.append(args)
        done.set()

    start(handler)
    if not done.wait(WAIT_S):
        raise CaptureDeviceError(
            f"macOS did not answer ({what}) within {WAIT_S:.0f} s. Quit and reopen DeskScribe; "
            "if it happens again, record system audio through BlackHole."
        )
    return got[0]


def _described(error) -> str:
    try:
        return str(error.localizedDescription())
    except Exception:
        return str(error)


@functools.cache
def _output_class():
    """The SCStreamOutput / SCStreamDelegate class (Objective-C class names are global:
    defined once per process)."""
    import objc
    from Foundation import NSObject

    try:
        protocols = [objc.protocolNamed(n) for n in ("SCStreamOutput", "SCStreamDelegate")]
    except objc.ProtocolError:  # not registered by this pyobjc: the methods are found anyway
        protocols = []

    # These run on a dispatch queue: an exception escaping them would abort the whole app
    # (pyobjc turns it into an Objective-C exception nobody catches), so none may.
    class DeskScribeAudioOutput(NSObject, protocols=protocols):
        def stream_didOutputSampleBuffer_ofType_(self, stream, buffer, kind) -> None:
            owner = getattr(self, "owner", None)
            if owner is None:
                return
            try:
                owner._sample_buffer(buffer, kind)
            except Exception as e:
                owner._lost_block(failure_message(e, "BlackHole"))

        def stream_didStopWithError_(self, stream, error) -> None:
            owner = getattr(self, "owner", None)
            if owner is not None:
                with contextlib.suppress(Exception):
                    owner._stopped_by_os(error)

    return DeskScribeAudioOutput


class ScreenCaptureKitStream(LoopbackStream):
    backend = BACKEND
    sample_format = "float32"

    def __init__(self, device: InputDevice, ring_seconds: float = 20.0) -> None:
        super().__init__(device, ring_seconds)
        self._stream = None
        self._output = None
        self._audio_type = 1  # SCStreamOutputTypeAudio (read from the framework at _open)

    def _open(self) -> None:
        sck, cm, dispatch = frameworks()
        self._cm = cm
        self._audio_type = sck.SCStreamOutputTypeAudio
        content, error = _completed(
            sck.SCShareableContent.getShareableContentWithCompletionHandler_, "screen content"
        )
        if error is not None or content is None or not content.displays():
            why = _described(error) if error is not None else "no display is listed"
            raise CaptureDeviceError(f"{permission_help(BACKEND)} (macOS said: {why})")
        filt = sck.SCContentFilter.alloc().initWithDisplay_excludingWindows_(
            content.displays()[0], []
        )
        config = sck.SCStreamConfiguration.alloc().init()
        config.setCapturesAudio_(True)
        config.setExcludesCurrentProcessAudio_(True)  # not DeskScribe's own sounds
        config.setSampleRate_(RATE)
        config.setChannelCount_(CHANNELS)
        config.setWidth_(2)  # a video stream is always there: make it as small as allowed
        config.setHeight_(2)
        config.setMinimumFrameInterval_(cm.CMTimeMake(1, 1))
        output = _output_class().alloc().init()
        output.owner = self
        stream = sck.SCStream.alloc().initWithFilter_configuration_delegate_(filt, config, output)
        queue = dispatch.dispatch_queue_create(b"deskscribe.system-audio", None)  # serial
        ok, error = stream.addStreamOutput_type_sampleHandlerQueue_error_(
            output, self._audio_type, queue, None
        )
        if not ok:
            raise CaptureDeviceError(
                f"ScreenCaptureKit refused an audio output ({_described(error)}). Record "
                "system audio through BlackHole instead."
            )
        try:
            (error,) = _completed(stream.startCaptureWithCompletionHandler_, "starting capture")
        except CaptureDeviceError:  # a start that comes late must not feed a failed stream
            output.owner = None
            with contextlib.suppress(Exception):
                stream.stopCaptureWithCompletionHandler_(lambda error: None)
            raise
        if error is not None:
            output.owner = None
            raise CaptureDeviceError(
                f"{permission_help(BACKEND)} (macOS said: {_described(error)})"
            )
        self._stream, self._output = stream, output

    def _close(self) -> None:
        stream, self._stream = self._stream, None
        output, self._output = self._output, None
        if output is not None:
            output.owner = None
        if stream is not None:
            done = threading.Event()
            stream.stopCaptureWithCompletionHandler_(lambda error: done.set())
            done.wait(WAIT_S)

    # ------------------------------------------------------------ from the OS's queue

    def _sample_buffer(self, buffer, kind) -> None:
        if kind != self._audio_type or self._stopping:
            return
        cm = self._cm
        block = cm.CMSampleBufferGetDataBuffer(buffer)
        if block is None:
            return
        length = cm.CMBlockBufferGetDataLength(block)
        if not length:
            return
        fmt = stream_format(
            cm.CMAudioFormatDescriptionGetStreamBasicDescription(
                cm.CMSampleBufferGetFormatDescription(buffer)
            )
        )
        problem = layout_problem(fmt, length, cm.CMSampleBufferGetNumSamples(buffer), self._rate)
        if problem is not None:
            self._lost_block(layout_message(problem, "BlackHole"))
            return
        status, data = cm.CMBlockBufferCopyDataBytes(block, 0, length, None)
        if status != 0 or not data:
            self._lost_block()
            return
        self._push_frames(
            float_frames(bytes(data), fmt.channels, bool(fmt.flags & NON_INTERLEAVED))
        )

    def _stopped_by_os(self, error) -> None:
        if not self._stopping:
            self.error = (
                f"macOS stopped recording what it plays ({_described(error)}). Your recording "
                "so far is kept; start again, or record system audio through BlackHole."
            )

"""macOS 14.4+ system audio: a Core Audio process tap, through pyobjc's CoreAudio wrapper.

NEVER RUN ON macOS YET: there is no Mac here. Written against pyobjc 12's CoreAudio metadata
(`AudioHardwareCreateProcessTap` as ``i@^I`` with the tap id an out argument,
`AudioHardwareCreateAggregateDevice` likewise, `AudioDeviceCreateIOProcIDWithBlock` whose
block receives pyobjc's own `AudioBufferList` type: indexable `AudioBuffer`s with
``mNumberChannels``, ``mDataByteSize`` and ``mData`` as a memoryview), Apple's headers and
its "Capturing system audio with Core Audio taps" steps. Property reads go through ctypes on
the CoreAudio framework (exact C layouts: `PropertyAddress`, `StreamDescription`). What does
not touch macOS is tested on Linux: reading buffer lists (`buffer_list_frames`) on real
speech, the tap format's layout and its checks, device choice and the help texts.

How it records:
1. a `CATapDescription` of every process's sound mixed to stereo, DeskScribe's own process
   excluded (its process object from its pid), private to this process, not muting anything;
2. `AudioHardwareCreateProcessTap`; the tap's format (`kAudioTapPropertyFormat`);
3. a private aggregate device clocked by the default output, with the tap in its tap list
   (started with the device, drift compensated);
4. an IO block on a serial dispatch queue hands each buffer list's float32 samples to
   `LoopbackStream._push`; teardown in reverse order (stop, IO proc, aggregate, tap).

Two pyobjc conventions that decide whether it works at all (found by review of pyobjc-core's
sources and pyobjc's own CoreAudio tests, not on a Mac): the block's last argument (the
output time) is in/out, so the Python block must return it on every path (returning None
makes pyobjc raise inside Core Audio's thread, which aborts the app); and the IO proc id
comes back as an opaque pointer that pyobjc cannot pass back (``^?``), so starting,
stopping and destroying it go through ctypes.

Permission: macOS asks once (``NSAudioCaptureUsageDescription``, in installers/macos/
Info.plist). Refused, the tap delivers exact zeros and no error: `SilenceWatch` turns that
into the steps to allow it. "Something plays" is another process running audio output
(`kAudioProcessPropertyIsRunningOutput`), not the output device running: the tap's own
aggregate device keeps that device running, so it would always say yes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device_types import CaptureDeviceError, InputDevice
from . import LoopbackStream, importable, native_device
from .formats import float_frames
from .screencapturekit import (
    NON_INTERLEAVED,
    StreamFormat,
    failure_message,
    layout_message,
    layout_problem,
    stream_format,
)

BACKEND = "process-tap"  # macos.PROCESS_TAP (macos imports this module, not the reverse)
CHANNELS = 2
FALLBACK_RATE = 48000  # shown in the device list; the tap's own rate is read when it opens
INSTEAD = "ScreenCaptureKit or BlackHole"  # what the user records through when the tap fails
COREAUDIO = "/System/Library/Frameworks/CoreAudio.framework/CoreAudio"
COREFOUNDATION = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"


def fourcc(code: str) -> int:
    """Core Audio's four-character codes as the integers its headers define."""
    return int.from_bytes(code.encode("ascii"), "big")


SYSTEM_OBJECT = 1  # kAudioObjectSystemObject
SCOPE_GLOBAL = fourcc("glob")  # kAudioObjectPropertyScopeGlobal
ELEMENT_MAIN = 0  # kAudioObjectPropertyElementMain
DEFAULT_OUTPUT = fourcc("dOut")  # kAudioHardwarePropertyDefaultOutputDevice
DEVICE_UID = fourcc("uid ")  # kAudioDevicePropertyDeviceUID
PROCESS_LIST = fourcc("prs#")  # kAudioHardwarePropertyProcessObjectList (macOS 14.2+)
RUNNING_OUTPUT = fourcc("piro")  # kAudioProcessPropertyIsRunningOutput
PID_TO_PROCESS = fourcc("id2p")  # kAudioHardwarePropertyTranslatePIDToProcessObject
TAP_FORMAT = fourcc("tfmt")  # kAudioTapPropertyFormat
TAP_UID = fourcc("tuid")  # kAudioTapPropertyUID
NOMINAL_RATE = fourcc("nsrt")  # kAudioDevicePropertyNominalSampleRate


class PropertyAddress(ctypes.Structure):
    """AudioObjectPropertyAddress."""

    _fields_ = [("mSelector", ctypes.c_uint32), ("mScope", ctypes.c_uint32),
                ("mElement", ctypes.c_uint32)]  # fmt: skip


class StreamDescription(ctypes.Structure):
    """AudioStreamBasicDescription (40 bytes: a Float64, then eight UInt32)."""

    _fields_ = [("mSampleRate", ctypes.c_double), ("mFormatID", ctypes.c_uint32),
                ("mFormatFlags", ctypes.c_uint32), ("mBytesPerPacket", ctypes.c_uint32),
                ("mFramesPerPacket", ctypes.c_uint32), ("mBytesPerFrame", ctypes.c_uint32),
                ("mChannelsPerFrame", ctypes.c_uint32), ("mBitsPerChannel", ctypes.c_uint32),
                ("mReserved", ctypes.c_uint32)]  # fmt: skip


def frameworks() -> Any:
    """pyobjc's CoreAudio with the process-tap API; a clear error when missing."""
    try:
        import CoreAudio
        import dispatch  # noqa: F401  (the IO block's queue)
    except ImportError:
        raise CaptureDeviceError(
            "Recording what this Mac plays through a Core Audio tap needs pyobjc's CoreAudio "
            "and libdispatch packages, which this installation lacks (installing DeskScribe "
            "with pip on macOS installs them); ScreenCaptureKit or BlackHole work without."
        ) from None
    if not hasattr(CoreAudio, "CATapDescription"):
        raise CaptureDeviceError(
            "This pyobjc has no Core Audio taps (pyobjc-framework-CoreAudio 11 or later has "
            "them); record system audio through ScreenCaptureKit or BlackHole."
        )
    return CoreAudio


def available() -> bool:
    return importable(frameworks)


def device() -> InputDevice:
    return native_device(
        "What this Mac plays (Core Audio tap)", FALLBACK_RATE, BACKEND, ProcessTapStream, CHANNELS
    )


def tap_buffers(buffers: Sequence, fmt: StreamFormat) -> list:
    """The tap's buffers of an aggregate device's input list: the last ones (one when
    interleaved, one per channel when not). The output device is the aggregate's clock, and
    when it has inputs of its own (a USB headset) their streams come first: mixing those in
    would record the microphone as system audio."""
    n = max(1, fmt.channels) if fmt.flags & NON_INTERLEAVED else 1
    count = len(buffers)
    return [buffers[i] for i in range(max(0, count - n), count)]


def buffer_list_frames(buffers: Sequence, planar_flag: bool) -> np.ndarray:
    """(frames, channels) float32 from one AudioBufferList as pyobjc hands it to the IO
    block: a single buffer of interleaved frames (``mNumberChannels`` each), or, when the
    format is non-interleaved, one buffer per channel. Only ``mDataByteSize`` bytes of each
    buffer are audio; channels of unequal length are cut to the shortest."""
    parts = []
    for i in range(len(buffers)):
        buf = buffers[i]
        data = buf.mData
        if data is None:
            continue
        raw = bytes(memoryview(data).cast("B")[: int(buf.mDataByteSize)])
        channels = max(1, int(buf.mNumberChannels))
        parts.append(float_frames(raw, channels, planar=False))
    if not parts:
        return np.zeros((0, 1), np.float32)
    if len(parts) == 1 and not planar_flag:
        return parts[0]
    n = min(p.shape[0] for p in parts)
    return np.concatenate([p[:n] for p in parts], axis=1)


def frames_problem(fmt: StreamFormat, buffers: Sequence) -> str | None:
    """Why a buffer list in ``fmt`` cannot be read as float32 (None: it can): the same
    checks as ScreenCaptureKit's buffers, per buffer."""
    for i in range(len(buffers)):
        buf = buffers[i]
        channels = max(1, int(buf.mNumberChannels))
        size = int(buf.mDataByteSize)
        per_buffer = StreamFormat(fmt.rate, fmt.flags, channels, fmt.bits)
        problem = layout_problem(per_buffer, size, size // (4 * channels), fmt.rate)
        if problem is not None:
            return problem
    return None


class CoreAudioProperties:
    """Reads Core Audio object properties with ctypes (`AudioObjectGetPropertyData`)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(COREAUDIO)
        self.cf = ctypes.CDLL(COREFOUNDATION)
        get = self.lib.AudioObjectGetPropertyData
        get.restype = ctypes.c_int32
        get.argtypes = [ctypes.c_uint32, ctypes.POINTER(PropertyAddress), ctypes.c_uint32,
                        ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]  # fmt: skip
        for name in ("AudioDeviceStart", "AudioDeviceStop", "AudioDeviceDestroyIOProcID"):
            fn = getattr(self.lib, name)  # (AudioObjectID, AudioDeviceIOProcID) -> OSStatus
            fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_uint32, ctypes.c_void_p]
        size = self.lib.AudioObjectGetPropertyDataSize
        size.restype = ctypes.c_int32
        size.argtypes = [ctypes.c_uint32, ctypes.POINTER(PropertyAddress), ctypes.c_uint32,
                         ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]  # fmt: skip
        self.cf.CFRelease.argtypes = [ctypes.c_void_p]

    def read(self, obj: int, selector: int, value, qualifier=None):
        """Fill the ctypes ``value`` with property ``selector`` of ``obj``; OSError on a
        non-zero status."""
        self._get(obj, selector, value, qualifier)
        return value

    def _get(self, obj: int, selector: int, value, qualifier=None) -> int:
        """``read``'s call; the bytes Core Audio wrote."""
        address = PropertyAddress(selector, SCOPE_GLOBAL, ELEMENT_MAIN)
        size = ctypes.c_uint32(ctypes.sizeof(value))
        q_size, q_ptr = 0, None
        if qualifier is not None:
            q_size, q_ptr = ctypes.sizeof(qualifier), ctypes.byref(qualifier)
        status = self.lib.AudioObjectGetPropertyData(
            obj, ctypes.byref(address), q_size, q_ptr, ctypes.byref(size), ctypes.byref(value)
        )
        _check_status(status, selector, obj)
        return size.value

    def uint(self, obj: int, selector: int, qualifier=None) -> int:
        return int(self.read(obj, selector, ctypes.c_uint32(), qualifier).value)

    def uints(self, obj: int, selector: int) -> list[int]:
        """A property that is an array of UInt32 (object ids)."""
        address = PropertyAddress(selector, SCOPE_GLOBAL, ELEMENT_MAIN)
        size = ctypes.c_uint32(0)
        status = self.lib.AudioObjectGetPropertyDataSize(
            obj, ctypes.byref(address), 0, None, ctypes.byref(size)
        )
        _check_status(status, selector, obj)
        values = (ctypes.c_uint32 * (size.value // 4))()
        written = self._get(obj, selector, values)
        return [int(v) for v in values[: written // 4]]  # the list may have shrunk meanwhile

    def string(self, obj: int, selector: int) -> str:
        """A CFString property (the caller owns it: released here)."""
        import objc

        ref = self.read(obj, selector, ctypes.c_void_p())
        if not ref.value:
            raise OSError(0, f"Core Audio property {selector:#x} of object {obj} is empty")
        try:
            return str(objc.objc_object(c_void_p=ref.value))
        finally:
            self.cf.CFRelease(ref)

    def tap_format(self, tap: int) -> StreamFormat:
        return stream_format(self.read(tap, TAP_FORMAT, StreamDescription()))

    def rate(self, device: int) -> float:
        return float(self.read(device, NOMINAL_RATE, ctypes.c_double()).value)

    def device_call(self, name: str, device: int, proc) -> int:
        """AudioDeviceStart / Stop / DestroyIOProcID with pyobjc's opaque proc id."""
        pointer = getattr(proc, "pointerAsInteger", proc)
        return int(getattr(self.lib, name)(device, ctypes.c_void_p(pointer)))


def _check_status(status: int, selector: int, obj: int) -> None:
    if status != 0:
        raise OSError(status, f"Core Audio property {selector:#x} of object {obj}")


class ProcessTapStream(LoopbackStream):
    backend = BACKEND
    sample_format = "float32"

    def __init__(self, device: InputDevice, ring_seconds: float = 20.0) -> None:
        super().__init__(device, ring_seconds)
        self._ca: Any = None
        self._props: CoreAudioProperties | None = None
        self._tap = 0
        self._aggregate = 0
        self._proc = None
        self._queue = None  # kept referenced while the IO block may run on it
        self._format: StreamFormat | None = None
        self._own = 0  # DeskScribe's process object (0: unknown)

    def _open(self) -> None:
        ca = self._ca = frameworks()
        import dispatch

        props = self._props = CoreAudioProperties()
        try:
            output_uid = props.string(props.uint(SYSTEM_OBJECT, DEFAULT_OUTPUT), DEVICE_UID)
        except OSError as e:
            raise CaptureDeviceError(
                f"macOS reports no output device to record ({e}). Choose an output in System "
                "Settings > Sound, or record system audio through BlackHole."
            ) from None
        own = []
        with contextlib.suppress(OSError):  # unknown: DeskScribe's own sounds are recorded too
            me = props.uint(SYSTEM_OBJECT, PID_TO_PROCESS, ctypes.c_int32(os.getpid()))
            own = [me] if me else []
            self._own = me
        description = ca.CATapDescription.alloc().initStereoGlobalTapButExcludeProcesses_(own)
        description.setName_("DeskScribe system audio")
        description.setPrivate_(True)
        description.setMuteBehavior_(getattr(ca, "CATapUnmuted", 0))
        status, tap = ca.AudioHardwareCreateProcessTap(description, None)
        self._check(status, "creating the system-audio tap")
        self._tap = int(tap)
        try:
            self._format = props.tap_format(self._tap)
            if self._format.channels < 1 or self._format.rate <= 0:
                raise CaptureDeviceError(f"the tap reports {self._format}")
            self._switched(self._format.rate, self._format.channels)
            try:
                tap_uid = props.string(self._tap, TAP_UID)
            except OSError:
                tap_uid = str(description.UUID().UUIDString())
            status, aggregate = ca.AudioHardwareCreateAggregateDevice(
                aggregate_description(output_uid, tap_uid), None
            )
            self._check(status, "creating the private capture device")
            self._aggregate = int(aggregate)
            with contextlib.suppress(OSError):  # the IO block runs at the aggregate's rate
                rate = props.rate(self._aggregate)
                if rate > 0 and rate != self._format.rate:
                    self._format = self._format._replace(rate=rate)
                    self._switched(rate, self._format.channels)
            self._queue = dispatch.dispatch_queue_create(b"deskscribe.process-tap", None)
            with warnings.catch_warnings():  # pyobjc warns that the proc id is opaque: it is
                warnings.simplefilter("ignore")
                status, proc = ca.AudioDeviceCreateIOProcIDWithBlock(
                    None, self._aggregate, self._queue, self._io
                )
            self._check(status, "attaching to the capture device")
            self._proc = proc
            self._check(
                props.device_call("AudioDeviceStart", self._aggregate, proc),
                "starting the capture",
            )
        except BaseException:
            self._close()
            raise

    def _check(self, status: int, what: str) -> None:
        if status:
            raise CaptureDeviceError(
                f"macOS refused {what} (Core Audio error {status}). Record system audio "
                "through ScreenCaptureKit or BlackHole instead."
            )

    def _close(self) -> None:
        ca, props = self._ca, self._props
        if ca is None or props is None:
            return
        aggregate, proc, tap = self._aggregate, self._proc, self._tap
        self._aggregate, self._proc, self._tap = 0, None, 0
        if aggregate and proc is not None:
            with contextlib.suppress(Exception):
                props.device_call("AudioDeviceStop", aggregate, proc)
            with contextlib.suppress(Exception):
                props.device_call("AudioDeviceDestroyIOProcID", aggregate, proc)
        if aggregate:
            with contextlib.suppress(Exception):
                ca.AudioHardwareDestroyAggregateDevice(aggregate)
        if tap:
            with contextlib.suppress(Exception):
                ca.AudioHardwareDestroyProcessTap(tap)

    def _playing(self) -> bool | None:
        """Whether another process runs audio output now (None: cannot tell)."""
        if self._props is None:
            return None
        for process in self._props.uints(SYSTEM_OBJECT, PROCESS_LIST):
            if process == self._own:
                continue
            with contextlib.suppress(OSError):  # a process that just exited
                if self._props.uint(process, RUNNING_OUTPUT):
                    return True
        return False

    # ------------------------------------------------------------ from the OS's queue

    def _io(self, now, inputs, input_time, outputs, output_time):
        """The IO block. The output time is in/out in pyobjc's metadata, so it is returned on
        every path. Runs on a dispatch queue, where an escaping exception aborts the app."""
        try:
            self._take(inputs)
        except Exception as e:
            self._lost_block(failure_message(e, INSTEAD))
        return output_time

    def _take(self, inputs) -> None:
        fmt = self._format
        if self._stopping or inputs is None or fmt is None:
            return
        buffers = tap_buffers(inputs, fmt)
        problem = frames_problem(fmt, buffers)
        if problem is not None:
            self._lost_block(layout_message(problem, INSTEAD))
            return
        frames = buffer_list_frames(buffers, bool(fmt.flags & NON_INTERLEAVED))
        if len(frames):
            self._push_frames(frames)


def aggregate_description(output_uid: str, tap_uid: str) -> dict:
    """The private aggregate device that reads the tap: clocked by the output the sound goes
    to, the tap started with it and drift compensated (Core Audio's dictionary keys)."""
    return {
        "name": "DeskScribe system audio",
        "uid": f"deskscribe-tap-{uuid.uuid4()}",
        "master": output_uid,  # kAudioAggregateDeviceMainSubDeviceKey
        "private": True,
        "stacked": False,
        "tapautostart": True,
        "subdevices": [{"uid": output_uid}],
        "taps": [{"uid": tap_uid, "drift": True}],
    }

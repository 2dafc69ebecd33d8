"""A private PulseAudio server for capture tests (pytest plugin: ``pytest_plugins = ["pulse"]``),
and a private PipeWire one (`PipeWireServer`, `pipewire_server`) that offers the same methods.

The session fixture ``pulse`` starts its own ``pulseaudio`` with no configuration (``-n``), only
a native-protocol socket that accepts anonymous clients, with its runtime and state folders in a
temporary folder, so it never touches (or needs) a desktop sound server and runs as root. The
test process then talks to it through ``PULSE_SERVER``: pulsectl, pactl/paplay, and PortAudio's
ALSA ``pulse`` device (libasound2-plugins) all read it. Null sinks stand in for speakers; their
``.monitor`` sources are what "system audio" records.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_SETUP_HINT = "run `bash scripts/test.sh`, which installs it"
_START_TIMEOUT_S = 15.0


def _die_with_parent() -> None:
    """In the daemon's child process: get SIGTERM if the test process dies (even on SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class PulseServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "run" / "native"
        self.log = folder / "pulseaudio.log"
        home, run = folder / "home", folder / "run"
        home.mkdir()
        run.mkdir(mode=0o700)
        # Anonymous clients are let in, but daemon and clients both look for a cookie and
        # complain without one: give them the same one.
        cookie = home / ".config" / "pulse" / "cookie"
        cookie.parent.mkdir(parents=True)
        cookie.write_bytes(os.urandom(256))
        self.env = {"PULSE_SERVER": f"unix:{self.socket}", "PULSE_COOKIE": str(cookie)}
        self._daemon_env = {
            **os.environ,
            "HOME": str(home),
            "XDG_RUNTIME_DIR": str(run),
            "XDG_CONFIG_HOME": str(home / ".config"),
        }
        for key in ("PULSE_SERVER", "PULSE_SOURCE", "PULSE_SINK"):
            self._daemon_env.pop(key, None)
        self._modules: dict[str, int] = {}
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        args = [
            "pulseaudio",
            "-n",  # no default.pa: only the modules below
            "--daemonize=no",
            "--exit-idle-time=-1",
            "--use-pid-file=no",
            "--system=no",
            "--realtime=no",
            "--high-priority=no",
            "--disallow-exit=yes",
            "--log-target=stderr",
            f"--load=module-native-protocol-unix socket={self.socket} auth-anonymous=1",
        ]
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                args,
                env=self._daemon_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C goes to pytest alone; its teardown stops us
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"pulseaudio exited at start:\n{self.log.read_text()}")
            if self.socket.exists() and self._pactl("info", check=False).returncode == 0:
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"pulseaudio did not answer in {_START_TIMEOUT_S} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _pactl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["pactl", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=10,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"pactl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def _load(self, key: str, module: str, *args: str) -> None:
        if key in self._modules:
            raise ValueError(f"{key!r} already exists")
        out = self._pactl("load-module", module, *args).stdout.strip()
        self._modules[key] = int(out)

    def add_null_sink(self, name: str, rate: int = 48000, channels: int = 2) -> str:
        """A sink that plays into nothing, in real time; returns its monitor source's name."""
        self._load(
            name,
            "module-null-sink",
            f"sink_name={name}",
            f"rate={rate}",
            f"channels={channels}",
            f"sink_properties=device.description={name}",
        )
        return f"{name}.monitor"

    def add_null_source(self, name: str, rate: int = 48000) -> str:
        """A silent source that is not a monitor (a stand-in microphone); returns its name."""
        self._load(name, "module-null-source", f"source_name={name}", f"rate={rate}")
        return name

    def add_microphone(self, name: str, rate: int = 48000) -> str:
        """A microphone that hears what is played into the sink ``<name>_air``: a real source
        (not a monitor, so it is listed as a microphone) remapped from that sink's monitor.
        Returns the sink to play into; unplug it with ``remove_source(name)``."""
        air = f"{name}_air"
        self.add_null_sink(air, rate=rate)
        self._load(
            name,
            "module-remap-source",
            f"master={air}.monitor",
            f"source_name={name}",
            f"source_properties=device.description={name}",
        )
        return air

    def set_default_sink(self, name: str) -> None:
        self._pactl("set-default-sink", name)

    def remove_sink(self, name: str) -> None:
        """Unload the sink (or source) module: to its clients the device was unplugged."""
        self._pactl("unload-module", str(self._modules.pop(name)))

    remove_source = remove_sink

    def play(self, wav_path: str | os.PathLike[str], sink: str) -> subprocess.Popen:
        """Play a WAV file into `sink` in real time (the process ends when it has played)."""
        return subprocess.Popen(
            ["paplay", "-d", sink, str(wav_path)],
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def play_recorded(
        self, wav_path: str | os.PathLike[str], sink: str, recorded: Callable[[], int]
    ) -> Played:
        """Play a WAV file into `sink` while something records its monitor; ``recorded()`` says
        how many (16 kHz) samples that recording holds. See `Played`."""
        return Played(self, wav_path, sink, recorded)


# Audio the capture side may still hold when paplay ends (PortAudio's and the sound server's
# buffers, the recorder's 50 ms drain), in seconds of audio: a margin counted in recorded
# samples, not in wall-clock time, so a busy machine that delays the recorder delays the wait
# with it.
CAPTURE_LATENCY_S = 0.3


class Played:
    """A clip played into a sink, and whether a recording of the sink's monitor holds all of it.

    paplay ends once the sink has played every sample it sent (it drains its stream). From
    paplay's start to its end the sink played ``ended_at - started_at`` seconds (the clip and
    any silence before it began), so the recording holds all of the clip once it has grown by
    at least that many samples since paplay started, plus `CAPTURE_LATENCY_S`: samples
    captured >= samples played. This replaces a fixed sleep after paplay, which a loaded
    machine could outrun (the recorder behind, the tail of the clip cut off by Stop)."""

    RATE = 16_000

    def __init__(self, server: PulseServer, wav_path, sink: str, recorded: Callable[[], int]):
        self.recorded = recorded
        self.start_samples = recorded()
        self.started_at = time.monotonic()
        self.proc = server.play(wav_path, sink)
        self.ended_at: float | None = None

    def ended(self) -> bool:
        """paplay has ended (it played everything or failed: see ``proc.returncode``)."""
        if self.ended_at is None and self.proc.poll() is not None:
            self.ended_at = time.monotonic()
        return self.ended_at is not None

    @property
    def needed(self) -> int | None:
        """The samples the recording must hold to have all of the clip (None: still playing)."""
        if not self.ended():
            return None
        assert self.ended_at is not None
        played_s = self.ended_at - self.started_at + CAPTURE_LATENCY_S
        return self.start_samples + round(played_s * self.RATE)

    def heard(self) -> bool:
        """paplay has ended and the recording holds every sample the sink played meanwhile."""
        needed = self.needed
        return needed is not None and self.recorded() >= needed

    def wait(self, timeout: float = 120.0) -> None:
        """Block until `heard` (not for a UI thread: there use ``qtbot.waitUntil(heard)``)."""
        deadline = time.monotonic() + timeout
        while not self.heard():
            if self.ended() and self.proc.returncode != 0:
                raise AssertionError(f"paplay failed: {self.proc.stderr.read()!r}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not recorded in {timeout} s: paplay ended={self.ended()}, recorded "
                    f"{self.recorded()} samples, needed {self.needed}"
                )
            time.sleep(0.02)
        assert self.proc.returncode == 0, self.proc.stderr.read()


class PipeWireServer(PulseServer):
    """PipeWire + WirePlumber + pipewire-pulse, as current desktops run them, private to the
    tests: their own session bus (dbus-daemon; WirePlumber wants one), runtime, config and
    state folders, so it needs no systemd, no login session and runs as root. Clients talk to
    pipewire-pulse's socket through ``PULSE_SERVER`` exactly as to PulseAudio, so
    `PulseServer`'s methods work unchanged (PipeWire implements the same pactl modules),
    except `add_null_source`: pipewire-pulse has no module-null-source."""

    TOOLS = ("dbus-daemon", "pipewire", "wireplumber", "pipewire-pulse", "pactl", "paplay")

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        run = folder / "run"
        self.socket = run / "pulse" / "native"
        self.env = {"PULSE_SERVER": f"unix:{self.socket}", "PULSE_COOKIE": self.env["PULSE_COOKIE"]}
        bus = f"unix:path={run / 'bus'}"
        self._daemon_env.update(
            DBUS_SESSION_BUS_ADDRESS=bus,
            XDG_STATE_HOME=str(folder / "home" / ".local" / "state"),
            XDG_DATA_HOME=str(folder / "home" / ".local" / "share"),
            PIPEWIRE_RUNTIME_DIR=str(run),
        )
        for key in ("PIPEWIRE_REMOTE", "DISPLAY", "WAYLAND_DISPLAY"):
            self._daemon_env.pop(key, None)
        self._processes: list[subprocess.Popen] = []

    def _spawn(self, *args: str) -> subprocess.Popen:
        log = open(self.folder / f"{Path(args[0]).name}.log", "wb")  # noqa: SIM115 (closed by the OS)
        proc = subprocess.Popen(
            args,
            env=self._daemon_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._processes.append(proc)
        return proc

    def _wait(self, what: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready():
            dead = [p.args[0] for p in self._processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                why = f"{dead} exited" if dead else f"no {what} in {_START_TIMEOUT_S} s"
                raise RuntimeError(f"PipeWire did not start ({why}):\n{self.log_tail()}")
            time.sleep(0.05)

    def start(self) -> None:
        run = self.folder / "run"
        # Desktops run PipeWire's graph on a real-time thread (RTKit); here it has none and
        # shares 2 cores with the test, so at the default 256-frame (5 ms) minimum quantum it
        # misses deadlines and the null sinks render with 256-frame jumps (parecord records
        # them too). A 1024-frame minimum (21 ms, the graph's own default quantum) keeps the
        # rendering whole; it changes nothing DeskScribe sees but when its blocks arrive.
        config = self.folder / "home" / ".config"
        for name, section, values in (
            ("pipewire.conf.d", "context.properties", "default.clock.min-quantum = 1024"),
            ("pipewire-pulse.conf.d", "pulse.properties",
             "pulse.min.req = 1024/48000\n    pulse.min.quantum = 1024/48000"),
        ):  # fmt: skip
            (config / "pipewire" / name).mkdir(parents=True, exist_ok=True)
            (config / "pipewire" / name / "deskscribe-tests.conf").write_text(
                f"{section} = {{\n    {values}\n}}\n"
            )
        self._spawn("dbus-daemon", "--session", f"--address=unix:path={run / 'bus'}",
                    "--nofork", "--nopidfile", "--nosyslog")  # fmt: skip
        self._wait("session bus", (run / "bus").exists)
        self._spawn("pipewire")
        self._wait("pipewire socket", (run / "pipewire-0").exists)
        self._spawn("wireplumber")
        self._spawn("pipewire-pulse")
        self._wait("pipewire-pulse", lambda: self._pactl("info", check=False).returncode == 0)
        # WirePlumber links streams to devices; it is up once it has chosen a default sink.
        self._wait("WirePlumber", lambda: "Default Sink: @" not in self._pactl("info").stdout)

    def stop(self) -> None:
        for proc in reversed(self._processes):
            proc.terminate()
        for proc in self._processes:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._processes = []

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for log in sorted(self.folder.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def add_null_source(self, name: str, rate: int = 48000) -> str:
        """A silent source that is not a monitor: a remapped monitor of a sink no one plays."""
        self.add_microphone(name, rate=rate)
        return name


def _require(tools, server: str):
    """Skip unless ``tools`` (the sound server's programs) and PortAudio are installed; the
    sounddevice module."""
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed ({server} for capture tests): {_SETUP_HINT}")
    try:
        import sounddevice
    except OSError:
        pytest.skip(f"PortAudio (libportaudio2) is not installed: {_SETUP_HINT}")
    return sounddevice


@contextlib.contextmanager
def pipewire_server() -> Iterator[PipeWireServer]:
    """A running private PipeWire; PULSE_SERVER points the test process at it meanwhile
    (and back at what it was after, e.g. the PulseAudio server of other test modules)."""
    sounddevice = _require(PipeWireServer.TOOLS, "PipeWire")
    server = PipeWireServer(Path(tempfile.mkdtemp(prefix="ds-pipewire-")))
    saved = {key: os.environ.get(key) for key in (*server.env, "PULSE_SOURCE", "PULSE_SINK")}
    try:
        server.start()
        os.environ.update(server.env)
        os.environ.pop("PULSE_SOURCE", None)
        os.environ.pop("PULSE_SINK", None)
        _reinit_portaudio()
        if not any(d["name"] == "pulse" for d in sounddevice.query_devices()):
            pytest.skip(f"PortAudio has no ALSA 'pulse' device (libasound2-plugins): {_SETUP_HINT}")
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reinit_portaudio()
        shutil.rmtree(server.folder, ignore_errors=True)


def _reinit_portaudio() -> None:
    """Make PortAudio enumerate again if it already did (without our server, it found nothing)."""
    sd = sys.modules.get("sounddevice")
    if sd is not None:
        sd._terminate()
        sd._initialize()


# One server per test process, however many modules import the fixture (each import makes its
# own session-scoped fixture definition): the first use starts it, the last one stops it.
_shared: PulseServer | None = None
_users = 0
_saved_env: dict[str, str | None] = {}


def _start_shared() -> PulseServer:
    global _shared, _saved_env
    sounddevice = _require(("pulseaudio", "pactl", "paplay"), "PulseAudio")
    server = PulseServer(Path(tempfile.mkdtemp(prefix="ds-pulse-")))
    _saved_env = {key: os.environ.get(key) for key in (*server.env, "PULSE_SOURCE", "PULSE_SINK")}
    _shared = server
    try:
        server.start()
        os.environ.update(server.env)
        os.environ.pop("PULSE_SOURCE", None)
        os.environ.pop("PULSE_SINK", None)
        _reinit_portaudio()
        if not any(d["name"] == "pulse" for d in sounddevice.query_devices()):
            pytest.skip(f"PortAudio has no ALSA 'pulse' device (libasound2-plugins): {_SETUP_HINT}")
    except BaseException:
        _stop_shared()
        raise
    return server


def _stop_shared() -> None:
    global _shared
    server, _shared = _shared, None
    if server is None:
        return
    server.stop()
    for key, value in _saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _reinit_portaudio()
    shutil.rmtree(server.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pulse() -> Iterator[PulseServer]:
    """A running private PulseAudio server; PULSE_SERVER points the test process at it."""
    global _users
    server = _shared or _start_shared()
    _users += 1
    try:
        yield server
    finally:
        _users -= 1
        if _users == 0:
            _stop_shared()

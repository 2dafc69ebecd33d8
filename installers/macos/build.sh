#!/usr/bin/env bash
# Build DeskScribe.app and a DMG on macOS; sign and notarize when credentials are given.
#   bash installers/macos/build.sh
# Signing (optional): MACOS_SIGN_IDENTITY="Developer ID Application: Name (TEAMID)"
# Notarization (optional, needs signing): MACOS_NOTARY_APPLE_ID, MACOS_NOTARY_TEAM_ID,
#   MACOS_NOTARY_PASSWORD (an app-specific password) — or MACOS_NOTARY_PROFILE (a keychain
#   profile made with `xcrun notarytool store-credentials`).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
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
"$APP/Contents/MacOS/deskscribe-cli" --self-test

if [ -n "${MACOS_SIGN_IDENTITY:-}" ]; then
  codesign --force --deep --options runtime --timestamp \
    --entitlements installers/macos/entitlements.plist --sign "$MACOS_SIGN_IDENTITY" "$APP"
  codesign --verify --strict --verbose=2 "$APP"
fi

VERSION="$(build/venv-mac/bin/python -c 'import deskscribe; print(deskscribe.__version__)')"
DMG="build/DeskScribe-${VERSION}.dmg"
STAGE=build/dmg && rm -rf "$STAGE" && mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/" && ln -s /Applications "$STAGE/Applications"
hdiutil create -volname DeskScribe -srcfolder "$STAGE" -ov -format UDZO "$DMG"

if [ -n "${MACOS_SIGN_IDENTITY:-}" ]; then
  codesign --sign "$MACOS_SIGN_IDENTITY" --timestamp "$DMG"
  if [ -n "${MACOS_NOTARY_PROFILE:-}" ]; then
    xcrun notarytool submit "$DMG" --keychain-profile "$MACOS_NOTARY_PROFILE" --wait
  elif [ -n "${MACOS_NOTARY_APPLE_ID:-}" ]; then
    xcrun notarytool submit "$DMG" --apple-id "$MACOS_NOTARY_APPLE_ID" \
      --team-id "$MACOS_NOTARY_TEAM_ID" --password "$MACOS_NOTARY_PASSWORD" --wait
  fi
  if [ -n "${MACOS_NOTARY_PROFILE:-}${MACOS_NOTARY_APPLE_ID:-}" ]; then
    xcrun stapler staple "$DMG"
  fi
fi
echo "$DMG"

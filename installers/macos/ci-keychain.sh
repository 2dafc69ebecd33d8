#!/usr/bin/env bash
# CI only: import the signing certificate into a temporary keychain that stays unlocked for
# the whole build and is on the search list (codesign finds identities only there).
# Environment (the workflow step's `env:`, from secrets): MACOS_CERTIFICATE_P12 (base64),
# MACOS_CERTIFICATE_PASSWORD; RUNNER_TEMP (set by GitHub Actions).
set -euo pipefail
if [ -z "${MACOS_CERTIFICATE_P12:-}" ]; then
  echo "ci-keychain.sh: no MACOS_CERTIFICATE_P12; building unsigned"
  exit 0
fi
KEYCHAIN="${RUNNER_TEMP:-/tmp}/build.keychain-db"
PASS="$(uuidgen)"
CERT="${RUNNER_TEMP:-/tmp}/cert.p12"
printf '%s' "$MACOS_CERTIFICATE_P12" | base64 --decode > "$CERT"
security create-keychain -p "$PASS" "$KEYCHAIN"
security set-keychain-settings -lut 21600 "$KEYCHAIN"  # unlocked for 6 h, not the default 5 min
security unlock-keychain -p "$PASS" "$KEYCHAIN"
security import "$CERT" -k "$KEYCHAIN" -P "$MACOS_CERTIFICATE_PASSWORD" -T /usr/bin/codesign
security set-key-partition-list -S apple-tool:,apple:,codesign: -s -k "$PASS" "$KEYCHAIN" >/dev/null
# Search list: this keychain first, then the ones already there (login, System).
existing=()
while IFS= read -r line; do
  line="${line#"${line%%[![:space:]]*}"}"
  existing+=("${line//\"/}")
done < <(security list-keychains -d user)
security list-keychains -d user -s "$KEYCHAIN" "${existing[@]}"
security find-identity -v -p codesigning "$KEYCHAIN"
rm -f "$CERT"

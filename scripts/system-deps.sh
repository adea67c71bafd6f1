#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Debian's chromium for the console's browser
# tests (Playwright drives it; its own browser download is never used). Installs it when missing
# and we are root; otherwise says what to install. Idempotent.
set -u
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: installing chromium from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
else
  echo "system-deps: chromium is missing; install it (apt-get install -y chromium) or the browser tests fail" >&2
fi
exit 0

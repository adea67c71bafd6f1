#!/usr/bin/env bash
# System packages the test suite needs beyond Python: Debian's chromium for the console's browser
# tests (Playwright drives it; its own browser download is never used), openssl for the
# certificate of the TLS-terminating proxy in front of the server (test_behind_a_proxy.py), and
# pg_dump / pg_restore for the PostgreSQL backup test (postgresql-client, installed with
# PostgreSQL itself), and valgrind for bench.instructions' smoke test (instructions counted by
# callgrind). Installs what is missing when we are root; otherwise says what to install.
# Idempotent.
set -u
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v pg_dump >/dev/null 2>&1 || missing+=(postgresql-client)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
if [ "${#missing[@]}" = "0" ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: installing ${missing[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "system-deps: ${missing[*]} missing; install them (apt-get install -y ${missing[*]}) or the tests that need them fail" >&2
fi
exit 0

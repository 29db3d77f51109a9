#!/bin/sh
# Install Debian's chromium package for the dashboard's headless-browser test.
# Idempotent: does nothing (no network) when /usr/bin/chromium already exists.
# Needs root (or sudo) and apt; the test fails with a clear message when it is absent.
set -eu
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "error: $CHROMIUM is missing and installing it needs root (apt-get install chromium)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: $CHROMIUM is missing and apt-get is not available: install Chromium by hand" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium
test -x "$CHROMIUM"

#!/usr/bin/env bash
# The headless browser of the explorer page's test (tests/search/test_explorer_browser.py):
# Debian's chromium + chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver), driven by
# selenium. Skipped when both are already there; needs root (CI runs as root) for apt-get.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
echo "installed $(/usr/bin/chromium --version)"

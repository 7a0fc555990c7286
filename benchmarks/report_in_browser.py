"""Opens a `ptm report` page in headless Chromium, takes a screenshot and checks that the page rendered.

Installs nothing itself: it uses Debian's Chromium at /usr/bin/chromium, installed once on the machine with
``sudo apt-get install -y chromium chromium-driver`` (or ``apt-get install -y chromium chromium-driver`` as
root). Two headless runs (Chromium's ``--headless`` mode; flags in https://peter.sh/experiments/chromium-command-line-switches/):

1. ``--dump-dom`` with ``--enable-logging=stderr --v=0``: the DOM after load. The page's own script
   (``evaluate/report.py`` CHECK_SCRIPT) has written ``report-ok N images`` into ``<title>`` when every ``<img>``
   is ``complete`` with ``naturalWidth > 0``, else ``report-bad ...``; Chromium prints every console message
   to stderr as ``CONSOLE(line)``, so an error there (``Uncaught``, ``Error``) fails the check.
2. ``--screenshot=OUT.png --window-size=W,H``: the picture.

    python benchmarks/report_in_browser.py runs/compare_gutenberg/report.html --screenshot docs/report_screenshot.png

Exit status 0 when the page rendered (every image decoded, no console error), 1 otherwise; a JSON line says why.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
         "--virtual-time-budget=5000"]


def run_chromium(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], check=False,
                              capture_output=True,
                              text=True, timeout=timeout)


def check(page: Path, screenshot: Path | None, width: int, height: int, timeout: int = 180) -> dict:
    if not Path(CHROMIUM).is_file():
        sys.exit(f"{CHROMIUM} not found: install it once with `sudo apt-get install -y chromium chromium-driver`")
    url = page.resolve().as_uri()
    dom = run_chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", url], timeout)
    title = re.search(r"<title>(.*?)</title>", dom.stdout, re.DOTALL)
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    errors = [line for line in console if re.search(r"Uncaught|Error|Failed to load", line)]
    result = {"page": str(page), "title": title.group(1) if title else None, "console_messages": len(console),
              "console_errors": errors}
    images = re.match(r"report-ok (\d+) images", result["title"] or "")
    result["images_loaded"] = int(images.group(1)) if images else 0
    result["ok"] = bool(images) and not errors
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        shot = run_chromium([f"--screenshot={screenshot.resolve()}", f"--window-size={width},{height}", url], timeout)
        result["screenshot"] = str(screenshot) if screenshot.is_file() else f"failed: {shot.stderr[-300:]}"
        result["ok"] = result["ok"] and screenshot.is_file()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("page", type=Path, help="the HTML file `ptm report` wrote")
    p.add_argument("--screenshot", type=Path, default=None, help="PNG to write (e.g. docs/report_screenshot.png)")
    p.add_argument("--width", type=int, default=1200)
    p.add_argument("--height", type=int, default=2400)
    args = p.parse_args()
    result = check(args.page, args.screenshot, args.width, args.height)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

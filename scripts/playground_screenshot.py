"""Screenshot of the playground page (http://HOST:8000/) translating a few English UI strings, from a real run.

Starts `s2s serve` on the default models, has headless Chromium (Debian's chromium + chromium-driver,
through Selenium) pick translate-en-ja, type the strings, press Translate and, once the outputs are
shown, save the window into docs/img/playground.png.

    .venv/bin/python scripts/playground_screenshot.py [--out docs/img/playground.png] [--size 1200x800]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness.server import s2s_serve  # noqa: E402

STRINGS = ["Save changes", "Open the file", "Delete this item?", "Settings", "Check for updates"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "playground.png")
    ap.add_argument("--size", default="1200x800", help="window size, WIDTHxHEIGHT")
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None or not Path("/usr/bin/chromedriver").exists():
        raise SystemExit("needs Debian's chromium and chromium-driver (make system-deps)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    tmp = Path(tempfile.mkdtemp(prefix="s2s-playground-"))
    stack = contextlib.ExitStack()
    server = stack.enter_context(s2s_serve(ROOT / "models", http=True, metrics=True))  # ready once it returns
    driver = None
    try:
        base = f"http://127.0.0.1:{server.http_port}"
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={tmp / 'chrome'}",
            f"--window-size={width},{height}",
        ):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        # The window size includes the (headless) browser frame: fix the page's viewport itself.
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(base + "/")
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option[value='translate-en-ja']"))
        Select(driver.find_element(By.ID, "model")).select_by_value("translate-en-ja")
        wait.until(lambda d: d.find_element(By.ID, "run").text == "Translate")
        beam = driver.find_element(By.ID, "beam")
        beam.clear()
        beam.send_keys("4")
        box = driver.find_element(By.ID, "input")
        box.clear()
        box.send_keys("\n".join(STRINGS))
        driver.find_element(By.ID, "run").click()
        wait.until(
            lambda d: d.find_element(By.ID, "outputs").get_attribute("data-state") in ("done", "error")
        )
        if driver.find_element(By.ID, "error").is_displayed():
            raise SystemExit("the page shows an error: " + driver.find_element(By.ID, "error").text)
        driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        print(args.out)
        return 0
    finally:
        if driver is not None:
            driver.quit()
        stack.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

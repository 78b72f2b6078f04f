"""The playground page driven in a real headless Chromium (Debian's chromium + chromium-driver, `make system-deps`):
``chromium()`` for each module's ``driver`` fixture, and ``Page``, shared by the playground's test modules."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 20

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or not Path(CHROMEDRIVER).exists(),
    reason="Debian's chromium and chromium-driver are not installed (`make system-deps` installs them)",
)


def chromium():
    """A headless Chromium under selenium (a test module's ``driver`` fixture yields from it); skips without one."""
    if CHROMIUM is None or not Path(CHROMEDRIVER).exists():
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (`make system-deps` installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="s2s-chrome-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1000,900",
    ):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    d.set_page_load_timeout(WAIT_S)
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


class Page:
    """The playground as a test drives it: ids #model, #input, #beam, #max-tokens, #token, #run, #outputs, #error."""

    def __init__(self, driver, port: int):
        self.d = driver
        self.d.get(f"http://127.0.0.1:{port}/")

    def find(self, css: str):
        from selenium.webdriver.common.by import By

        return self.d.find_element(By.CSS_SELECTOR, css)

    def wait(self, condition, what: str):
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.d, WAIT_S).until(lambda d: condition(), message=what)

    def models(self) -> list[str]:
        return self.d.execute_script(
            "return Array.from(document.querySelectorAll('#model option')).map(o => o.value).filter(v => v)"
        )

    def pick(self, model: str) -> None:
        from selenium.webdriver.support.ui import Select

        self.wait(lambda: model in self.models(), f"model {model} in #model")
        Select(self.find("#model")).select_by_value(model)

    def set(self, css: str, value: str) -> None:
        box = self.find(css)
        box.clear()
        box.send_keys(value)

    def paste(self, css: str, value: str) -> None:
        """A long value at once (send_keys types it key by key)."""
        self.d.execute_script("arguments[0].value = arguments[1]", self.find(css), value)

    def run(self, ctrl_enter: bool = False) -> str:
        """Press the button (or Ctrl+Enter in the input) and wait until the page shows outputs or an error."""
        from selenium.webdriver.common.keys import Keys

        self.d.execute_script("document.getElementById('outputs').dataset.state = 'sent'")
        if ctrl_enter:
            self.find("#input").send_keys(Keys.CONTROL, Keys.ENTER)
        else:
            self.find("#run").click()
        return self.wait(
            lambda: self.state() if self.state() in ("done", "error") else None, "outputs or an error"
        )

    def state(self) -> str:
        return self.find("#outputs").get_attribute("data-state")

    def outputs(self) -> list[str]:
        return self.d.execute_script(
            "return Array.from(document.querySelectorAll('#outputs .out')).map(e => e.textContent)"
        )

    def error(self) -> str:
        box = self.find("#error")
        return box.text if box.is_displayed() else ""

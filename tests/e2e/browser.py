"""Driving Debian's Chromium with Playwright (``executable_path``; no browser is ever
downloaded), for the dashboard tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("LEVERET_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: a laptop screen
VIEWPORT = {"width": 1366, "height": 800}


def needs_browser() -> None:
    missing = []
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("the playwright package")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        missing.append("Debian's chromium")
    if missing:
        message = " and ".join(missing) + " (scripts/test installs them)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the module's tests (each gets its own page)."""
    needs_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


class Page:
    """A dashboard page in a fresh browser context, with the page's script errors kept."""

    def __init__(self, browser: Any, base: str, viewport: dict[str, int] | None = None) -> None:
        self.context = browser.new_context(viewport=viewport or VIEWPORT)
        self.page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def login(self, path: str = "/", user: str = "guest", password: str = "guest") -> Any:
        p = self.page
        p.goto(self.base + path)
        p.wait_for_selector("#login:not([hidden])")
        p.fill("#username", user)
        p.fill("#password", password)
        p.click("#login button[type=submit]")
        p.wait_for_selector("#app:not([hidden])")
        return p

    def shot(self, name: str, full_page: bool = False) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        self.page.screenshot(path=str(path), full_page=full_page)
        assert path.stat().st_size > 10_000
        return path

    def close(self) -> None:
        self.context.close()

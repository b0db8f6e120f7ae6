"""The page's "Keep a folder in sync" panel in a real browser over the real app (``python app.py``):
a folder typed by its path is indexed in place, a file added to it afterwards shows in the
document list by itself (the page refreshes the watched folders every few seconds), and "Stop"
forgets the folder while its documents stay.
"""

from __future__ import annotations

import time

import pytest

from tests.ui.test_browser import GARDEN, ZEPHYR, App, open_app, require_browser, wait_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def app(tmp_path):
    require_browser()
    a = App(tmp_path)
    yield a
    a.stop()


def test_keep_a_folder_in_sync_from_the_page(app, tmp_path):
    from playwright.sync_api import sync_playwright

    folder = tmp_path / "my notes"
    folder.mkdir()
    (folder / "zephyr.md").write_text(ZEPHYR)
    app.start()
    with sync_playwright() as pw:
        browser, page, console = open_app(pw, app.url)
        page.fill("#watch-path textarea, #watch-path input", str(folder))
        page.click("#watch-add")
        assert "Keeping" in wait_text(page, "#watch-note", r"Keeping", 30)
        watched = wait_text(page, "#watch-list", r"watching[\s\S]*\d{4}-\d\d-\d\d", 120)
        assert str(folder) in watched
        wait_text(page, "#doc-list", r"zephyr\.md", 30)

        (folder / "garden.txt").write_text(GARDEN)  # nothing is clicked: the page shows it by itself
        start = time.monotonic()
        wait_text(page, "#doc-list", r"garden\.txt", 30)
        print(f"garden.txt shown {time.monotonic() - start:.1f} s after it was written")

        page.locator("#unwatch-pick input").click()
        page.get_by_role("option", name=str(folder)).click()
        page.click("#unwatch")
        assert "its documents stay" in wait_text(page, "#watch-note", r"Stopped watching", 30)
        assert str(folder) not in page.locator("#watch-list").inner_text()
        assert "garden.txt" in page.locator("#doc-list").inner_text()
        assert not [e for e in console if e.startswith("pageerror")], console
        browser.close()

"""Offline means offline, in a real browser (issue #40, item 8): every page of the app loads without one request to
a host other than the app's own. The tab's icon was a Material icon, which the browser fetched from Google's font
host (a console error on a machine without internet); it is now a file of the app (assets/favicon.png)."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from browser_helpers import chromium_page, streamlit_server
from test_browser import app_page_titles

ROOT = Path(__file__).resolve().parents[1]
#: The pages' URL paths (app.py's st.Page files), the default page first.
PAGE_PATHS = ["", "per_sample", "beta_layer", "compare", "evaluate", "dataset"]
#: Once a page is drawn, the time left for late requests (icons, fonts, images) before the next page.
SETTLE_MS = 4_000


def test_the_page_paths_are_app_pys_pages() -> None:
    assert len(PAGE_PATHS) == len(app_page_titles())
    assert all((ROOT / "pages" / f"{p}.py").is_file() for p in PAGE_PATHS if p)


def test_every_page_loads_without_a_request_to_another_host(tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with streamlit_server(tmp_path) as url, chromium_page() as page:
        own = urlsplit(url).netloc
        elsewhere: list[str] = []

        def only_here(route) -> None:
            """Blocks (and records) every request that leaves the app's server, as a machine offline would."""
            parts = urlsplit(route.request.url)
            if parts.scheme in ("data", "blob") or parts.netloc == own:
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        page.route("**/*", only_here)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if "ERR_" in m.text else None)
        for path in PAGE_PATHS:
            page.goto(f"{url}/{path}")
            expect(page.get_by_test_id("stSidebarNav")).to_be_visible()
            expect(page.get_by_test_id("stStatusWidget")).to_have_count(0)  # the page's script has finished
            page.wait_for_timeout(SETTLE_MS)
        assert elsewhere == [], f"requests to other hosts: {sorted(set(elsewhere))}"
        assert not [e for e in errors if "ERR_FAILED" in e or "ERR_NAME_NOT_RESOLVED" in e], errors
        # the tab's icon is served by the app itself
        icon = page.locator("link[rel~='icon']").first.get_attribute("href") or ""
        assert not urlsplit(icon).netloc or urlsplit(icon).netloc == own, icon

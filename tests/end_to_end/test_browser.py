"""The Dagster UI as a person sees it, in headless Chromium (Debian's package, driven by
Playwright; no browser download): the asset graph, one asset's lineage, and one posting
partition's materialization with its metadata. Screenshots go to results/browser/.

Uses the shared `dagster dev` of tests/live_pipeline.py and the postings its sensors
processed. `make test` installs Chromium when it is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline_defs.settings import PROJECT_ROOT
from tests.support.live_pipeline import LivePipeline

pytestmark = pytest.mark.live_dagster

SCREENSHOTS = PROJECT_ROOT / "results" / "browser"
RENDER_TIMEOUT_MS = 60_000
VIEWPORT = {"width": 1400, "height": 900}


def chromium_path() -> str:
    found = os.environ.get("PIPELINE_CHROMIUM") or shutil.which("chromium")
    if not found or not Path(found).exists():
        pytest.fail(
            "the browser test needs Chromium: `make test` installs Debian's package "
            "(apt-get install -y chromium), or set PIPELINE_CHROMIUM to a Chromium binary"
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):  # noqa: ANN001, ANN201 - playwright objects
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(RENDER_TIMEOUT_MS)
    yield page
    context.close()


def screenshot(page, name: str) -> Path:  # noqa: ANN001
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def test_asset_graph_shows_the_use_cases_and_their_inputs(
    page, live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    page.goto(f"{live_pipeline.url}/locations/posting_enrichment/asset-groups/enrichment/lineage")
    graph = page.locator("#root")
    for name in ("posting_summary", "posting_skills", "skill_entities"):
        graph.get_by_text(name, exact=True).first.wait_for()
    # the use cases' inputs from other groups appear as links into the graph
    graph.get_by_text("postings", exact=True).first.wait_for()
    graph.get_by_text("skills_taxonomy", exact=True).first.wait_for()
    page.get_by_text("100% filled").first.wait_for()  # the sensors' runs filled the partitions
    assert page.get_by_text("Join the Dagster community").count() == 0  # nux disabled in dagster.yaml
    assert screenshot(page, "asset_graph").stat().st_size > 0


def test_lineage_of_skill_entities_shows_what_it_reads(
    page, live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    page.goto(f"{live_pipeline.url}/assets/skill_entities?view=lineage")
    graph = page.locator("#root")
    for name in ("skill_entities", "posting_skills", "postings", "skills_taxonomy"):
        graph.get_by_text(name, exact=True).first.wait_for()
    # its neighbours only: the summary is not an input of skill resolution
    assert graph.get_by_text("posting_summary", exact=True).count() == 0
    screenshot(page, "skill_entities_lineage")


def test_partition_page_shows_model_tokens_and_preview(
    page, live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    key = enriched_postings[0]
    page.goto(f"{live_pipeline.url}/assets/posting_summary?view=partitions&partition={key}")
    metadata = {
        "model": "gemma3:270m",
        "backend": "ollama",
        "prompt_tokens": "412",
        "completion_tokens": "31",
        "preview": "A company hires a Data Analyst flow-a 1 for the work described.",
    }
    for label, value in metadata.items():
        row = page.get_by_role("row").filter(has=page.get_by_text(label, exact=True)).first
        row.wait_for()
        assert value in row.inner_text(), (label, row.inner_text())
    page.get_by_text("Materialized", exact=True).first.wait_for()
    screenshot(page, "partition_metadata")


def test_backfill_dialog_offers_batched_runs(
    page, live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    page.goto(f"{live_pipeline.url}/assets/posting_summary?view=partitions")
    page.get_by_text(enriched_postings[0], exact=True).first.wait_for()
    page.get_by_role("button", name="Materialize…").first.click()
    # the ingest recorded a materialization of `postings`: no "upstream not materialized" to confirm
    dialog_title = page.get_by_text("Launch runs to materialize posting_summary")
    dialog_title.wait_for()
    assert page.get_by_role("button", name="Confirm").count() == 0
    page.get_by_role("button", name="All", exact=True).click()
    page.get_by_text(
        f"Backfills in multiple runs, with a maximum of {live_pipeline.batch_size} partitions per run."
    ).wait_for()
    launch = page.get_by_role("button", name="Launch backfill")
    assert launch.is_enabled()
    screenshot(page, "backfill_dialog")
    page.get_by_role("button", name="Cancel").click()


def test_plots_show_tokens_and_latency_but_no_ids(
    page, live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    """The asset's metadata plots (Overview, Metadata, Plots) draw the numbers worth a line per posting
    (tokens, latency); the interaction's id is text, so no chart of ids appears."""
    page.goto(f"{live_pipeline.url}/assets/posting_summary?view=overview")
    page.get_by_role("button", name="Plots").first.click()
    for name in ("prompt_tokens", "completion_tokens", "latency_ms"):
        page.get_by_text(name, exact=True).first.wait_for()
    assert page.get_by_text("interaction_id", exact=True).count() == 0
    screenshot(page, "plots_posting_summary")

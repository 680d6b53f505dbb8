"""autodo on a sample TODO tree: scan (Markdown and code comments, heading paths, anchors, bad input),
identity across edits, stale after 3 unseen scans, and the item commands from the CLI."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from appdb.database import session_scope
from pipeline_defs.cli.main import main
from plugins.autodo import autodo_store as store
from plugins.autodo import service
from tests.support.autodo_tree import write_sample_tree


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_db_url: str) -> Path:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    tree = write_sample_tree(tmp_path)
    monkeypatch.chdir(tree)
    return tree


def items(url: str) -> dict[str, store.StoredItem]:
    with session_scope(url) as session:
        return store.stored_items(session)


def by_text(url: str) -> dict[str, store.StoredItem]:
    return {item.text: item for item in items(url).values()}


def test_scan_reads_markdown_and_code_with_heading_paths_and_reports_bad_input(
    tree: Path, app_db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["autodo", "scan"]) == 1  # some files were skipped: said so, the rest recorded
    err = capsys.readouterr().err
    assert "src/blob.py:0: binary file: skipped" in err
    assert "docs/huge.md:0: 1,500,000 bytes, over the 1,000,000-byte limit: skipped" in err
    assert "docs/notes.md:1: no headings: its 1 items are kept without a heading path" in err
    assert "docs/dup.md:3: duplicate anchor WI-042 (first at docs/ROADMAP.md:15)" in err
    found = by_text(app_db_url)
    stream = found["Stream large JSONL files instead of reading them whole"]
    assert (stream.file, stream.line, stream.heading, stream.status) == (
        "docs/ROADMAP.md",
        5,
        "Roadmap > Ingest",
        "open",
    )
    assert found["Reject rows without a key"].status == "done"  # a ticked box
    assert found["Merge postings from two boards: keep the longest description"].marker == "bold"
    assert found["read the database password from a file"].heading == "Roadmap > Ingest > Secrets"
    assert found["Pace the remote Ollama hosts"].key == "WI-042"
    assert found["Write the plugin guide"].heading == ""
    assert found["handle a BOM at the start of the file"].marker == "TODO"
    assert found["strips meaningful whitespace too"].marker == "FIXME"
    assert found["retry twice because the share is flaky"].marker == "HACK"
    assert found["Also claims the same anchor"].key != "WI-042"
    assert len(found) == 10


def test_edits_keep_identity_and_unseen_items_go_stale_after_three_scans(tree: Path, app_db_url: str) -> None:
    assert main(["autodo", "scan", "docs", "src"]) == 1
    before = by_text(app_db_url)
    roadmap = tree / "docs" / "ROADMAP.md"
    text = roadmap.read_text()
    text = text.replace("- [ ] Stream large JSONL files instead of reading them whole\n", "")
    text = "Intro line.\n\n" + text  # every line moves down: the fingerprint still matches
    text = text.replace("keep the longest description", "keep the longest descriptions")  # fuzzy
    roadmap.write_text(text)
    for _ in range(3):
        main(["autodo", "scan", "docs", "src"])
    after = by_text(app_db_url)
    assert len(items(app_db_url)) == len(before)  # nothing duplicated
    merge = "Merge postings from two boards: keep the longest descriptions"
    assert after[merge].key == before[merge.removesuffix("s")].key
    assert after["Pace the remote Ollama hosts"].line == 16
    assert after["Stream large JSONL files instead of reading them whole"].status == "stale"
    # Scanning another directory does not count as unseen for the docs.
    assert main(["autodo", "scan", "src"]) == 1
    assert by_text(app_db_url)["Write the plugin guide"].status == "open"


def test_anchors_are_written_back_on_request_and_then_identify_the_items(
    tree: Path, app_db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["autodo", "scan", "--write-anchors", "docs/ROADMAP.md", "src/reader.py"]) == 0
    assert "changed since the scan" not in capsys.readouterr().err
    roadmap = (tree / "docs" / "ROADMAP.md").read_text()
    key = by_text(app_db_url)["Stream large JSONL files instead of reading them whole"].key
    assert f"- [ ] Stream large JSONL files instead of reading them whole <!-- TODO:{key} -->" in roadmap
    bold = by_text(app_db_url)["Merge postings from two boards: keep the longest description"].key
    [merge] = [line for line in roadmap.splitlines() if "**Merge postings" in line]
    assert merge.endswith(f"<!-- TODO:{bold} -->")
    assert (
        "# TODO: handle a BOM at the start of the file <!-- TODO:" in (tree / "src" / "reader.py").read_text()
    )
    # The item's text changes entirely, the anchor keeps it.
    (tree / "docs" / "ROADMAP.md").write_text(roadmap.replace("Stream large JSONL", "Read big NDJSON"))
    assert main(["autodo", "scan", "docs/ROADMAP.md", "src/reader.py"]) == 0
    assert by_text(app_db_url)["Read big NDJSON files instead of reading them whole"].key == key


def test_a_failed_anchor_write_leaves_the_file_as_it_was_and_says_so(
    tree: Path, app_db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    roadmap = tree / "docs" / "ROADMAP.md"
    before, files = roadmap.read_bytes(), sorted(roadmap.parent.iterdir())

    def disk_full(source: str, target: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(service.os, "replace", disk_full)
    assert main(["autodo", "scan", "--write-anchors", "docs/ROADMAP.md"]) == 1
    out, err = capsys.readouterr()
    assert "docs/ROADMAP.md:0: anchors not written: [Errno 28] No space left on device" in err
    assert "wrote" not in out  # no anchor is claimed
    assert roadmap.read_bytes() == before
    assert sorted(roadmap.parent.iterdir()) == files  # no temporary file left
    assert by_text(app_db_url)["Stream large JSONL files instead of reading them whole"].status == "open"


def test_anchors_keep_the_files_line_endings_and_permissions(tree: Path, app_db_url: str) -> None:
    roadmap = tree / "docs" / "ROADMAP.md"
    roadmap.write_bytes(roadmap.read_bytes().replace(b"\n", b"\r\n"))
    roadmap.chmod(0o640)
    assert main(["autodo", "scan", "--write-anchors", "docs/ROADMAP.md"]) == 0
    key = by_text(app_db_url)["Stream large JSONL files instead of reading them whole"].key
    text = roadmap.read_bytes()
    assert f"whole <!-- TODO:{key} -->\r\n".encode() in text
    assert b"\n" not in text.replace(b"\r\n", b"")  # every line still ends in CRLF
    assert roadmap.stat().st_mode & 0o777 == 0o640


def test_pick_split_dep_tree_done_from_the_cli(
    tree: Path, app_db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["autodo", "scan", "docs/ROADMAP.md"])
    found = by_text(app_db_url)
    stream = found["Stream large JSONL files instead of reading them whole"].key
    secrets = found["read the database password from a file"].key
    assert main(["autodo", "prio", secrets, "P0"]) == 0
    assert main(["autodo", "prio", secrets, "P9"]) == 2
    capsys.readouterr()
    assert main(["autodo", "pick"]) == 0
    assert secrets in capsys.readouterr().out  # P0 first
    assert main(["autodo", "split", secrets, "Add a secrets file setting", "Read it at start-up"]) == 0
    children = [item.key for item in items(app_db_url).values() if item.parent == secrets]
    assert len(children) == 2
    assert main(["autodo", "dep", stream, "WI-042", "pace before streaming"]) == 0
    assert main(["autodo", "dep", "WI-042", stream, "a cycle"]) == 2
    assert "would make a cycle" in capsys.readouterr().err
    assert main(["autodo", "pick", "3"]) == 0
    picked = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert picked == [*children, "WI-042"]  # the split parent and the waiting item are blocked
    assert main(["autodo", "tree"]) == 0
    tree_out = capsys.readouterr().out
    assert f"[ ] {secrets} P0 read the database password from a file" in tree_out
    assert f"  [ ] {children[0]} P0 Add a secrets file setting" in tree_out
    assert "(after WI-042)" in tree_out
    for child in children:
        assert main(["autodo", "done", child]) == 0
    assert main(["autodo", "note", secrets, "children done"]) == 0
    capsys.readouterr()
    assert main(["autodo", "pick"]) == 0
    assert secrets in capsys.readouterr().out  # its children are done: ready now
    assert main(["autodo", "show", secrets]) == 0
    shown = capsys.readouterr().out
    assert "children done" in shown and "docs/ROADMAP.md:11 under Roadmap > Ingest > Secrets" in shown
    assert main(["autodo", "wontfix", "WI-999"]) == 2


def test_unreadable_files_are_reported_and_the_rest_recorded(tree: Path, app_db_url: str) -> None:
    with session_scope(app_db_url) as session:
        outcome = service.scan(session, [tree / "docs" / "missing.md", tree / "src" / "reader.py"], tree)
    assert [str(p) for p in outcome.problems][0].endswith("missing.md:0: no such file or directory")
    assert len(outcome.record.new) == 3


def scan_in_a_thread(arguments: list[str]) -> int:
    """`pipeline autodo scan` in a daemon thread, so a scan blocked on a FIFO fails the test, not the
    session; the bound is a hang detector, far above the second the scan takes."""
    outcome: list[int] = []
    worker = threading.Thread(target=lambda: outcome.append(main(arguments)), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the scan did not finish in 120 s: it blocked on a FIFO or a device"
    return outcome[0]


def test_scan_reads_regular_files_only_inside_the_tree_and_within_the_cap(
    tree: Path,
    tmp_path: Path,
    app_db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    os.mkfifo(tree / "docs" / "pipe.md")  # no writer: reading it blocks for ever
    (tree / "docs" / "zero.md").symlink_to("/dev/zero")  # endless: reading it fills the memory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private.md").write_text("# Private\n\n- [ ] an item from outside the tree\n")
    (tree / "docs" / "outside.md").symlink_to(elsewhere / "private.md")
    (tree / "docs" / "kept.text").write_text("# Linked\n\n- [ ] an item through a link inside the tree\n")
    (tree / "docs" / "inside.md").symlink_to(tree / "docs" / "kept.text")

    assert scan_in_a_thread(["autodo", "scan"]) == 1
    err = capsys.readouterr().err
    assert "docs/pipe.md:0: a FIFO, not a regular file: skipped" in err
    assert "docs/zero.md:0: a symlink to /dev/zero, outside the scanned directory: skipped" in err
    assert f"docs/outside.md:0: a symlink to {elsewhere / 'private.md'}, outside the scanned directory" in err
    found = by_text(app_db_url)
    assert "an item through a link inside the tree" in found
    assert "an item from outside the tree" not in found
    assert "Stream large JSONL files instead of reading them whole" in found  # the rest is recorded

    monkeypatch.setenv("PIPELINE_AUTODO_MAX_FILE_BYTES", "1000")
    assert scan_in_a_thread(["autodo", "scan", "docs", "--follow-symlinks"]) == 1
    err = capsys.readouterr().err
    assert "docs/huge.md:0: 1,500,000 bytes, over the 1,000-byte limit: skipped" in err
    assert "docs/zero.md:0: a character device, not a regular file: skipped" in err  # followed, not read
    assert "outside the scanned directory" not in err
    assert "an item from outside the tree" in by_text(app_db_url)


def test_a_symlink_loop_and_a_file_name_that_is_not_utf8_are_reported_and_the_rest_recorded(
    tree: Path, app_db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both aborted the scan with a traceback (RuntimeError: Symlink loop; UnicodeEncodeError)."""
    (tree / "docs" / "loop-a.md").symlink_to("loop-b.md")
    (tree / "docs" / "loop-b.md").symlink_to("loop-a.md")
    latin1 = os.fsencode(tree / "docs") + b"/caf\xe9.md"  # "café.md" as Latin-1 bytes
    with open(latin1, "wb") as handle:
        handle.write(b"# Cafe\n\n- [ ] an item in a file whose name is not UTF-8\n")
    for arguments in (["autodo", "scan"], ["autodo", "scan", "docs", "--follow-symlinks"]):
        assert main(arguments) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        assert "docs/loop-a.md:0: a symlink loop: skipped" in err
        assert "docs/loop-b.md:0: a symlink loop: skipped" in err
        assert "docs/caf\\xe9.md:0: the file name is not valid UTF-8: skipped (rename it)" in err
        found = by_text(app_db_url)
        assert "Stream large JSONL files instead of reading them whole" in found
        assert "an item in a file whose name is not UTF-8" not in found


def test_an_unreadable_directory_is_reported_and_its_items_never_go_stale(
    tree: Path, app_db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was skipped without a word, and its items counted as unseen: stale after three scans."""
    assert main(["autodo", "scan"]) == 1
    docs = tree / "docs"
    in_docs = {item.key for item in items(app_db_url).values() if item.file and item.file.startswith("docs/")}
    assert in_docs
    docs.chmod(0)
    if os.geteuid() == 0:  # root lists any directory: it is refused here as the kernel would to a user
        listing = os.scandir

        def refused(path: object = ".") -> object:
            if Path(os.fsdecode(path)).resolve() == docs.resolve():  # type: ignore[arg-type]
                raise PermissionError(13, "Permission denied", os.fsdecode(path))  # type: ignore[arg-type]
            return listing(path)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "scandir", refused)
    try:
        for _ in range(4):
            assert main(["autodo", "scan"]) == 1
            err = capsys.readouterr().err
            assert (
                "warning: docs:0: cannot read the directory: Permission denied: skipped, and its items are "
                "not counted as unseen"
            ) in err
    finally:
        docs.chmod(0o755)
    stored = items(app_db_url)
    assert [stored[key].text for key in in_docs if stored[key].status == "stale"] == []

"""Every console example in README.md and docs/ is run and matches what it shows
(tests/docs_examples.py: the block format, the not-run mark, the normalisation; re-sync with
``python tests/docs_examples.py --update``)."""

import shutil

import docs_examples as de
import pytest

DOCS = [p for p in de.documents() if de.blocks(p)]


def test_the_readme_has_console_examples():
    assert de.ROOT / "README.md" in DOCS
    runnable = [b for b in de.blocks(de.ROOT / "README.md") if not b.not_run]
    assert len(runnable) >= 5


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(de.ROOT)) for p in DOCS])
def test_console_examples_match(path, examples_out, monkeypatch):
    monkeypatch.setenv("WEIGHTCHECK_CACHE_DIR", "")
    ws = de.workspace(examples_out)
    try:
        bad = de.differences(path, ws)
    finally:
        shutil.rmtree(ws, ignore_errors=True)
    assert not bad, "\n\n".join(bad) + "\n\nre-sync: python tests/docs_examples.py --update"


def test_a_wrong_output_is_caught_and_update_rewrites_it(tmp_path, examples_out, monkeypatch):
    doc = tmp_path / "page.md"
    doc.write_text(
        "text\n\n```console\n$ weightcheck rule WC305 --format json\nnot what it prints\n[exit 7]\n```\n"
    )
    monkeypatch.setattr(de, "ROOT", tmp_path)
    ws = de.workspace(examples_out)
    try:
        assert len(de.differences(doc, ws)) == 1
        assert de.update(doc, ws)
        assert de.differences(doc, ws) == []
        text = doc.read_text()
        assert '"code": "WC305"' in text and "[exit 0]" in text and "not what it prints" not in text
    finally:
        shutil.rmtree(ws, ignore_errors=True)


def test_an_unmarked_block_of_another_command_is_an_error(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(
        "```console\n$ weightcheck inspect x\n$ rm -rf x\n```\n\n"
        "<!-- not-run: needs the Hub -->\n```console\n$ weightcheck inspect org/name\nwhatever\n```\n"
    )
    b1, b2 = de.blocks(doc)
    assert b2.not_run == "needs the Hub" and de.problems(b2) == []
    assert b1.not_run is None and len(de.problems(b1)) == 1


def test_normalisation_is_paths_padding_and_timings_only():
    assert de.normalize(["a    b", "---  -----", "done in 0.12 s"]) == ["a b", "- -", "done in <t>"]
    assert de.normalize(["400 draft tokens"]) != de.normalize(["401 draft tokens"])


def test_blocks_run_in_document_order(tmp_path, examples_out, monkeypatch):
    """A later block reads what an earlier one wrote, in the check and in --update alike."""
    doc = tmp_path / "page.md"
    doc.write_text(
        "```console\n$ weightcheck convert examples/out/kimi-k2-drafter examples/out/o --to vllm\n```\n\n"
        "```console\n$ weightcheck inspect examples/out/o --format json\n[exit 9]\n```\n"
    )
    monkeypatch.setattr(de, "ROOT", tmp_path)
    ws = de.workspace(examples_out)
    try:
        de.update(doc, ws)
        assert "[exit 0]" in doc.read_text() and "path not found" not in doc.read_text()
    finally:
        shutil.rmtree(ws, ignore_errors=True)

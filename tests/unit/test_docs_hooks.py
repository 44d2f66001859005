"""The manual's generated pages (tools/mkdocs_hooks.py): every sdm command in the CLI reference, every result page."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import mkdocs_hooks  # noqa: E402


def test_the_cli_reference_has_every_command_and_option() -> None:
    from sdm._cli.main import app

    text = mkdocs_hooks.cli_reference()
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        assert f"## `sdm {name}`" in text, name
        for param in cmd.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"`{param.opts[0]}`" in text, (name, param.opts)
    assert "### `sdm bench ncio`" in text and "Usage: sdm export [OPTIONS]" in text


def test_markdown_outside_code_is_escaped() -> None:
    assert mkdocs_hooks._escape("a_b *c* `x_y*` <int>") == r"a\_b \*c\* `x_y*` &lt;int&gt;"


def test_examples_kept_as_written_are_code_blocks() -> None:
    text = "Find runs.\n\n    Every CONDITION\n    must hold:\n\n    \b\n      sdm find 'nx>=32' 'case=demo'\n      sdm find x=1\n"
    assert mkdocs_hooks._help_text(text) == ("Find runs.\n\nEvery CONDITION must hold:\n\n"
                                             "```\nsdm find 'nx>=32' 'case=demo'\nsdm find x=1\n```")


def test_every_result_has_a_page() -> None:
    names = mkdocs_hooks._result_names()
    assert "peers" in names and len(names) == len(list((REPO / "benchmarks" / "results").glob("*.md")))
    page = mkdocs_hooks._result_page("peers")
    assert page.startswith("# ") and "![benchmarks/results/peers.png](peers.png)" in page

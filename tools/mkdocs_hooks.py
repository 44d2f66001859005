"""MkDocs hooks of the manual (``mkdocs.yml``: ``hooks:``): the pages generated at build time.

* ``cli.md``: the placeholder ``<!-- sdm-cli-reference -->`` becomes the reference of every
  ``sdm`` command, read from the typer application itself (``typer.main.get_command``), so
  that the manual says what ``sdm COMMAND --help`` says;
* ``benchmarks/guide.md`` is ``benchmarks/README.md``, and ``benchmarks/results/NAME.md`` each
  ``benchmarks/results/NAME.md`` with its ``NAME.png`` below it; the results pages join the
  navigation under "Benchmarks", and ``<!-- sdm-benchmark-results -->`` lists them;
* in the API reference, Sphinx roles left in docstrings (``:class:`Catalog```) read as code.

Only the standard library, MkDocs and what ``sdm``'s command line imports are used; nothing
imports mpi4py (the command line never initializes MPI).
"""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
RESULTS = BENCH / "results"
CLI_MARK = "<!-- sdm-cli-reference -->"
RESULTS_MARK = "<!-- sdm-benchmark-results -->"


# --------------------------------------------------------------------------- the CLI reference


def _cli_command() -> Any:
    """The click command behind the ``sdm`` script named in pyproject.toml."""
    import typer

    src = str(REPO / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["sdm"]
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, typer.Typer):
        return typer.main.get_command(obj)
    if hasattr(obj, "params") and hasattr(obj, "collect_usage_pieces"):  # a click command
        return obj
    raise TypeError(f"the sdm script {target} is neither a typer application nor a click command")


_CODE = re.compile(r"(`[^`]*`)")


def _escape(text: str) -> str:
    """Markdown-safe prose: code spans kept, ``* _ [ ] \\`` outside them escaped, ``< >`` as entities."""
    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):
        escaped = re.sub(r"([*_\[\]\\])", r"\\\1", parts[i])
        parts[i] = escaped.replace("<", "&lt;").replace(">", "&gt;")
    return "".join(parts)


def _help_text(text: str | None) -> str:
    """A command's help (its docstring) as Markdown paragraphs; a paragraph that click keeps as written (its
    first line ``\\b``: examples) as a code block."""
    if not text:
        return ""
    import inspect

    out = []
    for p in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        if p.lstrip().startswith("\b"):
            lines = p.lstrip()[1:].strip("\n")
            out.append("```\n" + inspect.cleandoc(lines) + "\n```")
        elif p.strip():
            out.append(_escape(" ".join(p.split())))
    return "\n\n".join(out)


def _param(param: Any, ctx: Any) -> str:
    """One argument or option as a list item: names, metavar, what it does, default."""
    if param.param_type_name == "argument":
        names = f"`{param.make_metavar(ctx)}`"
    else:
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        if not getattr(param, "is_flag", False) and not getattr(param, "count", False):
            names += f" `{param.make_metavar(ctx)}`"
    facts = []
    if param.required:
        facts.append("required")
    default = param.default
    if (getattr(param, "show_default", False) and not getattr(param, "is_flag", False)
            and default not in (None, "", False, ()) and not callable(default)):
        facts.append(f"default `{default}`")
    help_text = _help_text(getattr(param, "help", None)) or "(no help text)"
    return f"- {names}: {help_text}" + (f" ({', '.join(facts)})" if facts else "")


def _command_md(cmd: Any, ctx: Any, path: list[str], level: int) -> list[str]:
    """The reference of *cmd* and, for a group, of each of its commands."""
    lines = [f"{'#' * level} `{' '.join(path)}`", ""]
    if not path[1:]:
        lines = []
    help_text = _help_text(cmd.help)
    if help_text:
        lines += [help_text, ""]
    usage = " ".join([*path, *cmd.collect_usage_pieces(ctx)])
    lines += ["```", f"Usage: {usage}", "```", ""]
    params = [p for p in cmd.params if not getattr(p, "hidden", False)]
    arguments = [p for p in params if p.param_type_name == "argument"]
    options = [p for p in params if p.param_type_name != "argument"]
    for title, items in (("Arguments", arguments), ("Options", options)):
        if items:
            lines += [f"**{title}**", ""] + [_param(p, ctx) for p in items] + [
                "- `--help`: Show this message and exit."] * (title == "Options") + [""]
    if hasattr(cmd, "commands"):  # a group (typer may bring its own copy of click's classes)
        for name, sub in cmd.commands.items():
            if getattr(sub, "hidden", False):
                continue
            sub_ctx = type(ctx)(sub, info_name=name, parent=ctx)
            lines += _command_md(sub, sub_ctx, [*path, name], level + (1 if path[1:] else 0))
    return lines


def cli_reference() -> str:
    """Markdown of every ``sdm`` command, from the commands themselves."""
    cmd = _cli_command()
    ctx = cmd.context_class(cmd, info_name="sdm")
    return "\n".join(_command_md(cmd, ctx, ["sdm"], 2))


# --------------------------------------------------------------------------- benchmark pages


def _result_names() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("*.md"))


def _result_page(name: str) -> str:
    text = (RESULTS / f"{name}.md").read_text()
    if (RESULTS / f"{name}.png").is_file():
        text += f"\n\n![benchmarks/results/{name}.png]({name}.png)\n"
    json_file = RESULTS / f"{name}.json"
    if json_file.is_file():
        text += (f"\n\nEvery sample, the options and the host are in `benchmarks/results/{name}.json`; "
                 f"how this benchmark runs: [the benchmarks](../guide.md).\n")
    return text


def _guide_page() -> str:
    # links from benchmarks/README.md into docs/ point at the manual's pages
    return (BENCH / "README.md").read_text().replace("](../docs/", "](../")


def _title(name: str) -> str:
    for line in (RESULTS / f"{name}.md").read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return name


def on_config(config: Any, **_: Any) -> Any:
    """Add the results pages to the navigation, under "Benchmarks"."""
    results = [{_title(n): f"benchmarks/results/{n}.md"} for n in _result_names()]
    for item in config["nav"] or []:
        if isinstance(item, dict) and "Benchmarks" in item:
            item["Benchmarks"] = [*item["Benchmarks"], {"Results": results}]
    return config


def on_files(files: Files, config: Any, **_: Any) -> Files:
    files.append(File.generated(config, "benchmarks/guide.md", content=_guide_page()))
    for name in _result_names():
        files.append(File.generated(config, f"benchmarks/results/{name}.md", content=_result_page(name)))
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/results/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    if RESULTS_MARK in markdown:
        here = Path(page.file.src_uri).parent
        rel = Path("benchmarks/results").relative_to(here) if str(here) != "." else Path("benchmarks/results")
        markdown = markdown.replace(RESULTS_MARK, "\n".join(
            f"- [{_title(n)}]({(rel / (n + '.md')).as_posix()})" for n in _result_names()))
    return markdown


_ROLES = r":(?:py:)?(?:func|meth|class|mod|attr|data|exc|obj|const):"
_ROLE = re.compile(_ROLES + r"(?=<code>|<a )")
_ROLE_TEXT = re.compile(_ROLES + r"`~?([^`<]+)`")


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """Sphinx roles of the docstrings (``:class:`~sdm.Session```) read as plain code in the API pages."""
    if page.file.src_uri.startswith("api/"):
        html = _ROLE_TEXT.sub(r"<code>\1</code>", _ROLE.sub("", html)).replace("<code>~", "<code>")
    return html

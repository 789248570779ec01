"""MkDocs hooks: pages made at build time, so the site never holds a hand-copied text.

- ``cli.md``: ``seqenc --help`` and every subcommand's help, from the parsers of
  :data:`seqenc.cli.COMMANDS` (the curated ``fit`` / ``validate`` / ``test`` help included).
- ``architecture.md`` and ``benchmarks.md``: ``ARCHITECTURE.md`` and ``BENCHMARKS.md`` of the
  repository root, their links to other repository files turned into the files' paths (the site
  holds only the documentation pages).
- ``<!-- README: Title -->`` in a page: the body of the README's ``## Title`` section, so the
  commands, the configs table and the output columns are written once.
- The docstrings' Sphinx roles (:func:`x`, :meth:`title <target>`, :class:`~a.b.C`) shown as code.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout's seqenc, whatever the venv installed
# repository file -> the page that holds it on the site
PAGES = {"ARCHITECTURE.md": "architecture.md", "BENCHMARKS.md": "benchmarks.md"}
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
README_SECTION = re.compile(r"^<!-- README: (.+) -->$", re.MULTILINE)
# a Sphinx role as the Markdown renderer leaves it: :role:<code>[~]name[ <target>]</code>
ROLE = re.compile(r":[a-z]+:<code>(~?)([^<]*?)(?: &lt;[^<]*?&gt;)?</code>")


def fence(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```"


def cli_reference() -> str:
    """The command-line reference page, from the parsers the ``seqenc`` command runs."""
    os.environ["COLUMNS"] = "100"  # argparse wraps help text to the terminal width
    from seqenc.cli import COMMANDS, LIGHTNING, parser_of, usage
    from seqenc.commands.train import curated_help

    lines = ["# Command line", "", "Generated from the parsers of `seqenc/cli.py` at build time."]
    lines += ["", fence(usage())]
    for name, command in COMMANDS.items():
        lightning = command.module == LIGHTNING
        text = curated_help(name) if lightning else parser_of(name)[0].format_help()
        lines += ["", f"## seqenc {name}", "", f"{command.summary}.", "", fence(text)]
    return "\n".join(lines) + "\n"


def site_links(text: str) -> str:
    """``text`` with links to repository files mapped to their site page (``docs/x.md`` is ``x.md``),
    or, for files the site does not hold, replaced by the file's path."""

    def replace(match: re.Match[str]) -> str:
        label, target = match.groups()
        path, _, anchor = target.partition("#")
        if not path or "://" in path:
            return match.group(0)
        if path in PAGES:
            page = PAGES[path]
        elif path.startswith("docs/"):
            page = path.removeprefix("docs/")
        elif path.endswith(label.strip("`")):
            return f"`{path}`"
        else:
            return f"{label} (`{path}`)"
        return f"[{label}]({page}{'#' + anchor if anchor else ''})"

    return LINK.sub(replace, text)


def readme_section(title: str) -> str:
    """The body of the README's ``## title`` section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index(f"\n## {title}\n") + len(title) + 5
    end = readme.find("\n## ", start)
    return readme[start : None if end < 0 else end].strip()


def on_page_markdown(markdown: str, **kwargs) -> str:
    return README_SECTION.sub(lambda m: site_links(readme_section(m.group(1))), markdown)


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html)


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    for source, page in PAGES.items():
        content = site_links((ROOT / source).read_text(encoding="utf-8"))
        files.append(File.generated(config, page, content=content))
    return files

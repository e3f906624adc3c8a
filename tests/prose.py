"""The paragraphs and bullets of a page, for the word limit of findings.md and of the report's
Claims page (a table row, a heading or code is not prose)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

#: The most words a paragraph or a bullet of findings.md or the Claims page may hold.
LIMIT = 80


def markdown_blocks(text: str) -> list[str]:
    """The paragraphs and bullets of a Markdown (or reStructuredText) page, each as one string."""
    blocks, current, code = [], [], False

    def flush():
        if current:
            blocks.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            code = not code
        if code or stripped.startswith("```") or not stripped or stripped.startswith(("|", "#", "<!--", "..")):
            flush()
            continue
        if re.match(r"([-*]|\d+\.) ", stripped):
            flush()
        current.append(stripped)
    flush()
    return blocks


class _Blocks(HTMLParser):
    """The text of every <p>, <li> and <summary> of an HTML page."""

    TAGS = ("p", "li", "summary")

    def __init__(self):
        super().__init__()
        self.blocks, self.open = [], []

    def handle_starttag(self, tag, attrs):
        if tag in self.TAGS:
            self.open.append([])

    def handle_endtag(self, tag):
        if tag in self.TAGS and self.open:
            self.blocks.append("".join(self.open.pop()))

    def handle_data(self, data):
        if self.open:
            self.open[-1].append(data)


def html_blocks(page: str) -> list[str]:
    """The paragraphs, list items and summaries of an HTML page, as text."""
    parser = _Blocks()
    parser.feed(page)
    return parser.blocks


def too_long(blocks: list[str], limit: int = LIMIT) -> list[str]:
    """The blocks of more than ``limit`` words, each cut to its first words."""
    return [" ".join(b.split()[:12]) + " ..." for b in blocks if len(b.split()) > limit]

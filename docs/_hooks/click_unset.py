"""MkDocs hook: mkdocs-click 0.9 prints click 8.3's "no default" marker.

Since click 8.3 an option declared without a default holds the sentinel
``UNSET``, which mkdocs-click (0.9.0, its latest release) renders verbatim
as ``Sentinel.UNSET`` in the Default column. Such an option has no default
value, which mkdocs-click elsewhere writes as ``None``; this hook writes
that instead. It changes nothing else, and nothing once mkdocs-click
handles the sentinel itself.
"""

from __future__ import annotations

from typing import Any

_UNSET = "<code>Sentinel.UNSET</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    """Replace the sentinel in the generated option tables."""
    return html.replace(_UNSET, "None")

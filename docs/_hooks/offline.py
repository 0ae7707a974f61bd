"""MkDocs hook: the built site needs nothing from another host.

Strategy: Material for MkDocs draws Mermaid diagrams with Mermaid's
JavaScript, which it fetches from a CDN unless a global ``mermaid`` already
exists when a page with a diagram loads. Neither CI nor many readers can
reach a CDN, and a 3.5 MB file does not belong in git. So this hook takes
the self-contained ``dist/mermaid.min.js`` of the ``mermaid`` npm package
(fetched by the install step, never at build time), copies it into the
site and names it in ``extra_javascript``; Material's loader then finds the
global and fetches nothing. After the build, every page and stylesheet is
scanned for a resource on another host (a script, a stylesheet, an image,
a font, a frame): one is a build error, so a theme option or plugin that
would fetch something cannot slip in. Links to other sites are fine: a
reader follows them, the page does not need them.

Where the file comes from, first found wins:

1. ``SANDRAIL_MERMAID_JS``: the path of a ``mermaid.min.js``;
2. ``node_modules/mermaid/dist/mermaid.min.js`` beside ``mkdocs.yml``
   (``npm install --no-save mermaid@11``).

Neither is a build error that says how to get it.
"""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

MERMAID_VERSION = "11.17.2"
"""The Mermaid release CI fetches (Material's loader expects Mermaid 11)."""

MERMAID_SITE_PATH = "assets/javascripts/mermaid.min.js"

GET_MERMAID = (
    f"npm install --no-save mermaid@{MERMAID_VERSION}   "
    "(in the repository; or set SANDRAIL_MERMAID_JS to a mermaid.min.js)"
)

# Attributes whose URL the browser loads by itself while showing the page.
_LOADED = {
    "script": ("src",),
    "img": ("src", "srcset"),
    "iframe": ("src",),
    "source": ("src", "srcset"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "embed": ("src",),
    "object": ("data",),
}
# <link rel=...> kinds that make the browser fetch (or connect).
_LOADING_RELS = {
    "stylesheet",
    "preload",
    "modulepreload",
    "prefetch",
    "preconnect",
    "dns-prefetch",
    "icon",
    "manifest",
}
_CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""")


def _mermaid_source(config: MkDocsConfig) -> Path:
    named = os.environ.get("SANDRAIL_MERMAID_JS", "").strip()
    root = Path(config.config_file_path).parent
    candidates = (
        [Path(named)] if named else [root / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"]
    )
    for path in candidates:
        if path.is_file():
            return path
    raise PluginError(
        f"Mermaid's JavaScript was not found ({', '.join(map(str, candidates))}); "
        f"the site serves it itself so that diagrams render offline. Get it with: {GET_MERMAID}"
    )


_source: Path | None = None


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Check Mermaid's file is here and load it on every page."""
    global _source
    _source = _mermaid_source(config)
    scripts = config.extra_javascript
    if MERMAID_SITE_PATH not in [str(script) for script in scripts]:
        scripts.append(MERMAID_SITE_PATH)
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Copy Mermaid's file into the site."""
    assert _source is not None, "on_config runs first"
    files.append(File.generated(config, MERMAID_SITE_PATH, abs_src_path=str(_source)))
    return files


def _external(url: str) -> bool:
    parts = urlsplit(url.strip())
    return bool(parts.netloc) or parts.scheme not in ("", "data", "blob")


class _Loads(HTMLParser):
    """Every URL a page makes the browser load."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "link":
            rels = set(values.get("rel", "").lower().split())
            if rels & _LOADING_RELS:
                self.urls.append(values.get("href", ""))
            return
        for name in _LOADED.get(tag, ()):
            if name in values:
                # srcset: "url 1x, url 2x"
                self.urls.extend(
                    part.split()[0] for part in values[name].split(",") if part.split()
                )
        if "style" in values:
            self.urls.extend(_CSS_URL.findall(values["style"]))


def external_loads(site_dir: Path) -> dict[str, list[str]]:
    """Every page or stylesheet of the built site that loads something from
    another host, with those URLs."""
    found: dict[str, list[str]] = {}
    for path in sorted(site_dir.rglob("*")):
        if path.suffix == ".html":
            parser = _Loads()
            parser.feed(path.read_text(encoding="utf-8"))
            urls = parser.urls
        elif path.suffix == ".css":
            urls = _CSS_URL.findall(path.read_text(encoding="utf-8"))
        else:
            continue
        outside = sorted({url for url in urls if _external(url)})
        if outside:
            found[str(path.relative_to(site_dir))] = outside
    return found


def on_post_build(config: MkDocsConfig, **kwargs: Any) -> None:
    """Fail the build when a page needs another host."""
    found = external_loads(Path(config.site_dir))
    if found:
        lines = "; ".join(f"{page}: {', '.join(urls)}" for page, urls in found.items())
        raise PluginError(
            f"pages load resources from other hosts (the site must work offline): {lines}"
        )

"""MkDocs hook: the site serves the repository's ``examples/`` folder.

The how-tos show the part of an example a reader needs and name the whole
program (``examples/approval_pydantic_ai.py``); this hook adds each example
file to the site at ``examples/<name>``, so a page links it as
``../examples/<name>`` and the link resolves in the built site as in the
repository. The files are copied as they are: the tests run them
(``tests/test_examples.py``), the site only serves them.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every ``examples/*.py`` beside ``mkdocs.yml`` to the site's files."""
    root = Path(config.config_file_path).parent
    for path in sorted((root / "examples").glob("*.py")):
        files.append(
            File(
                f"examples/{path.name}",
                src_dir=str(root),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    return files

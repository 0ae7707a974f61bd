"""sandrail's build backend: setuptools, plus an editable install that type
checkers can read.

The import package ``sandrail`` is assembled from three folders
(``pyproject.toml``'s ``[tool.setuptools.package-dir]``): ``sandrail/``,
with ``core/`` as ``sandrail.core`` and ``interpreters/`` as
``sandrail.interpreters``. A wheel copies them into one tree. setuptools'
editable install (PEP 660) maps them with an import hook instead, which
Python follows and mypy and pyright do not: a user's ``mypy --strict`` then
reports ``Cannot find implementation or library stub for module named
"sandrail"``.

So :func:`build_editable` adds one thing to setuptools' editable wheel: a
*link tree*, ``build/editable/sandrail/``, whose entries are symbolic links
to the folders and files of the source (``core`` links to ``core/``, every
entry of ``sandrail/`` to itself), and a ``.pth`` file that puts
``build/editable`` on ``sys.path``. Type checkers read ``.pth`` files, so
they see the package as the wheel lays it out; Python imports through the
same tree. A file added to ``core/``, ``interpreters/`` or a subpackage is
seen at once (its folder is a link); one added directly to ``sandrail/`` is
found by setuptools' import hook, which stays installed behind the tree,
until the next ``pip install -e .`` links it too. Where symbolic links
cannot be made (Windows without the privilege), the tree is left out and
the install is setuptools' own, with a warning.

Everything else (wheel, sdist, metadata) is setuptools' ``build_meta``
unchanged. See ``docs/development.md`` ("The layout").
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the PEP 517 hooks, re-exported)
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

TREE = Path("build", "editable")
"""The link tree, relative to the project folder (``build/`` is ignored by git)."""

_PTH = "__editable__.sandrail-types.pth"


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' editable wheel, plus the link tree and its ``.pth`` (see
    the module docstring). The tree is made anew on every editable build."""
    name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    project = Path.cwd()
    tree = project / TREE
    try:
        link_tree(project, tree)
    except OSError as error:
        shutil.rmtree(tree, ignore_errors=True)
        print(
            f"sandrail: no link tree ({error}); type checkers will not see this "
            "editable install (the wheel is unaffected)",
            file=sys.stderr,
        )
        return name
    add_to_wheel(Path(wheel_directory) / name, _PTH, f"{tree.resolve()}\n".encode())
    return name


def package_dirs(project: Path) -> dict[str, str]:
    """``[tool.setuptools.package-dir]`` of ``project``'s ``pyproject.toml``."""
    with (project / "pyproject.toml").open("rb") as file:
        config = tomllib.load(file)
    dirs: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return dirs


def link_tree(project: Path, tree: Path) -> None:
    """Lay out ``tree`` as the wheel would lay out the packages, every entry a
    symbolic link into ``project``; ``OSError`` if links cannot be made.

    A package folder that holds no other mapped package is one link (so a
    file added to it is seen at once); one that does (``sandrail/``) is a
    real folder of links to its entries, beside the links to its mapped
    subpackages.
    """
    dirs = package_dirs(project)
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    for package, folder in sorted(dirs.items()):
        target = tree.joinpath(*package.split("."))
        source = (project / folder).resolve()
        nested = {name.rpartition(".")[2] for name in dirs if name.rpartition(".")[0] == package}
        if not nested:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(source, target, target_is_directory=True)
            continue
        target.mkdir(parents=True, exist_ok=True)
        for entry in sorted(source.iterdir()):
            if entry.name not in nested and entry.name != "__pycache__":
                os.symlink(entry, target / entry.name, target_is_directory=entry.is_dir())
    for module in _py_modules(project):
        os.symlink((project / module).resolve(), tree / module)


def _py_modules(project: Path) -> list[str]:
    with (project / "pyproject.toml").open("rb") as file:
        config = tomllib.load(file)
    return [f"{name}.py" for name in config["tool"]["setuptools"].get("py-modules", [])]


def add_to_wheel(wheel: Path, name: str, data: bytes) -> None:
    """Add the file ``name`` holding ``data`` to ``wheel``, and its line to the
    wheel's ``RECORD``."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(rewritten, "w") as out:
        for info in source.infolist():
            content = source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                content += f"{name},sha256={digest},{len(data)}\n".encode()
            out.writestr(info, content)
        out.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    rewritten.replace(wheel)

"""The layout: one import package ``sandrail`` from three folders (``core/``
is ``sandrail.core``, ``interpreters/`` is ``sandrail.interpreters``), laid
out as one tree by the wheel and by the editable install's link tree, which
type checkers read (``build_support/sandrail_build.py``;
``docs/development.md``, "The layout")."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import sysconfig
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sandrail_build", ROOT / "build_support" / "sandrail_build.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_source_tree_holds_no_links() -> None:
    """No symbolic link is tracked: a Windows checkout and every tool that
    resolves paths see each file once, under one name."""
    tracked = os.popen(f"git -C {ROOT} ls-files -s").read().splitlines()
    assert tracked, "git ls-files listed nothing"
    assert [line for line in tracked if line.startswith("120000")] == []


MAX_MODULE_LINES = 800
"""The longest a module of the library may be: one idea, small enough to read
in one sitting (``docs/development.md``, "The layout"); past it, its parts
get names, and modules, of their own."""


def test_every_library_module_is_at_most_800_lines() -> None:
    """No module under ``sandrail/``, ``core/`` or ``interpreters/`` is longer
    than :data:`MAX_MODULE_LINES` lines."""
    long = {
        str(path.relative_to(ROOT)): count
        for folder in ("sandrail", "core", "interpreters")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules longer than {MAX_MODULE_LINES} lines: {long}"


def _installed_root() -> tuple[Path, bool]:
    """The folder the installed distribution puts on ``sys.path`` for type
    checkers (the link tree of an editable install, site-packages for a
    wheel), and whether the install is editable."""
    # The installed distribution, not a sandrail.egg-info a build left in
    # the working folder (which is on sys.path under pytest).
    purelib = sysconfig.get_paths()["purelib"]
    (dist,) = importlib.metadata.distributions(name="sandrail", path=[purelib])
    for file in dist.files or ():
        if file.name == "__editable__.sandrail-types.pth":
            return Path(Path(str(file.locate())).read_text(encoding="utf-8").strip()), True
    return Path(str(dist.locate_file(""))), False


def test_the_installed_package_is_one_tree_a_type_checker_reads() -> None:
    """However installed, the folder a type checker finds on ``sys.path``
    holds ``sandrail`` with ``core`` and ``interpreters`` inside it."""
    root, _ = _installed_root()
    assert (root / "sandrail" / "__init__.py").is_file()
    assert (root / "sandrail" / "py.typed").is_file()
    assert (root / "sandrail" / "core" / "_effects.py").is_file()
    assert (root / "sandrail" / "interpreters" / "simulator.py").is_file()


def test_the_editable_link_tree_is_current() -> None:
    """An editable install's link tree links every entry of ``sandrail/``
    and the two mapped folders. A module added directly to ``sandrail/``
    after the install is missing from it until ``pip install -e .`` runs
    again, and this test says so (the import still works, through
    setuptools' hook, but a type checker would not see the module)."""
    root, editable = _installed_root()
    if not editable:  # a wheel: its tree is copied, never stale
        assert not (root / "sandrail" / "core").is_symlink()
        return
    tree = root / "sandrail"
    wanted = {entry.name for entry in (ROOT / "sandrail").iterdir()} - {"__pycache__"}
    missing = sorted(wanted - {entry.name for entry in tree.iterdir()})
    assert missing == [], f"not in the link tree: {missing}; run `pip install -e .` again"
    assert (tree / "core").resolve() == ROOT / "core"
    assert (tree / "interpreters").resolve() == ROOT / "interpreters"


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    for folder in ("pkg", "pkg/sub", "lib", "lib/deep"):
        (project / folder).mkdir(parents=True)
        (project / folder / "__init__.py").write_text("")
    (project / "pkg" / "a.py").write_text("")
    (project / "lib" / "b.py").write_text("")
    (project / "start.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[tool.setuptools]\npy-modules = ["start"]\n'
        '[tool.setuptools.package-dir]\npkg = "pkg"\n"pkg.lib" = "lib"\n'
    )
    return project


def test_link_tree_lays_out_the_packages_as_the_wheel_does(tmp_path: Path) -> None:
    """A mapped package with no mapped child is one link to its folder (a
    file added there is seen at once); the parent is a folder of links."""
    backend = _backend()
    project = _project(tmp_path)
    tree = tmp_path / "tree"
    backend.link_tree(project, tree)
    assert not (tree / "pkg").is_symlink()
    assert sorted(entry.name for entry in (tree / "pkg").iterdir()) == [
        "__init__.py",
        "a.py",
        "lib",
        "sub",
    ]
    assert (tree / "pkg" / "lib").is_symlink()
    assert (tree / "pkg" / "lib").resolve() == (project / "lib").resolve()
    assert (tree / "start.py").resolve() == (project / "start.py").resolve()
    (project / "lib" / "new.py").write_text("")
    assert (tree / "pkg" / "lib" / "new.py").is_file()
    backend.link_tree(project, tree)  # laid anew, not on top of the old one
    assert (tree / "pkg" / "a.py").is_symlink()


def test_add_to_wheel_records_the_added_file(tmp_path: Path) -> None:
    """The ``.pth`` added to setuptools' editable wheel is listed in its
    RECORD with its hash and size, so pip installs (and uninstalls) it."""
    backend = _backend()
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr("x.pth", "import y\n")
        out.writestr("x-1.0.dist-info/RECORD", "x.pth,sha256=abc,9\nx-1.0.dist-info/RECORD,,\n")
    backend.add_to_wheel(wheel, "types.pth", b"/some/tree\n")
    with zipfile.ZipFile(wheel) as source:
        assert source.read("types.pth") == b"/some/tree\n"
        assert source.read("x.pth") == b"import y\n"
        record = source.read("x-1.0.dist-info/RECORD").decode().splitlines()
    digest = base64.urlsafe_b64encode(hashlib.sha256(b"/some/tree\n").digest()).rstrip(b"=")
    assert record[-1] == f"types.pth,sha256={digest.decode()},11"


def test_without_links_the_editable_wheel_is_setuptools_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where links cannot be made, the editable wheel is left as setuptools
    built it (it still imports, through setuptools' hook), no half-made tree
    stays behind, and the build says why type checkers will not see it."""
    backend = _backend()
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    wheels = tmp_path / "wheels"
    wheels.mkdir()

    def built(directory: str, *_: object) -> str:
        with zipfile.ZipFile(Path(directory) / "x.whl", "w") as out:
            out.writestr("x-1.0.dist-info/RECORD", "")
        return "x.whl"

    def no_links(*_: object, **__: object) -> None:
        raise OSError("symbolic links are not permitted")

    monkeypatch.setattr(backend._setuptools, "build_editable", built)
    monkeypatch.setattr(backend.os, "symlink", no_links)
    assert backend.build_editable(str(wheels)) == "x.whl"
    with zipfile.ZipFile(wheels / "x.whl") as source:
        assert source.namelist() == ["x-1.0.dist-info/RECORD"]
    assert not (project / "build" / "editable").exists()
    assert "type checkers will not see this editable install" in capsys.readouterr().err


def test_every_adapter_module_but_the_kit_is_held_to_public_helpers() -> None:
    """The import-linter contract "Adapters are glue on public helpers" holds
    every module of the adapters' folder, at any depth, by a pattern (a new
    adapter is held to it without being listed), and lets through the kit's
    own imports only."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["name"].startswith("Adapters are glue on public helpers")
    ]
    assert contract["source_modules"] == ["sandrail.adapters", "sandrail.adapters.**"]
    assert contract["ignore_imports"] == ["sandrail.adapters.kit -> sandrail.**"]
    assert contract["as_packages"] is False

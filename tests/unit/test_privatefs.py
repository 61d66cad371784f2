"""memoryd.privatefs on real directories and files, under the common umask 022."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd import privatefs


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_make_dirs_creates_every_missing_component_0700_and_leaves_existing_ones(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    deep = tmp_path / "a" / "b" / "c"
    created = privatefs.make_dirs(deep)
    assert created == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(deep)]
    assert [_mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", deep)] == [0o700] * 3
    assert _mode(tmp_path) == 0o755  # there before: not memoryd's
    # os.makedirs, for contrast: the mode reaches the last component only.
    os.makedirs(tmp_path / "x" / "y", mode=0o700)
    assert (_mode(tmp_path / "x"), _mode(tmp_path / "x" / "y")) == (0o755, 0o700)
    assert privatefs.make_dirs(deep) == []  # all there: nothing created, nothing changed


def test_make_dirs_under_a_umask_that_masks_the_owner_still_gives_0700(tmp_path: Path) -> None:
    os.umask(0o277)
    privatefs.make_dirs(tmp_path / "d")
    assert _mode(tmp_path / "d") == 0o700


def test_ensure_private_dir_tightens_its_own_leaves_a_readable_foreign_one_and_never_a_sticky_one(
        tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    assert privatefs.ensure_private_dir(own, what="data directory", own=True).action == privatefs.TIGHTEN
    assert _mode(own) == 0o700

    users = tmp_path / "users"
    users.mkdir(mode=0o755)
    assert privatefs.ensure_private_dir(users, what="socket directory", own=False).action == privatefs.OK
    assert _mode(users) == 0o755

    for mode, own_it in ((0o1777, True), (0o1777, False), (0o775, False), (0o757, False)):
        shared = tmp_path / f"shared-{mode:o}-{own_it}"
        shared.mkdir()
        shared.chmod(mode)
        with pytest.raises(privatefs.NotPrivate) as refused:
            privatefs.ensure_private_dir(shared, what="socket directory", own=own_it)
        assert _mode(shared) == mode
        assert "memoryd" in refused.value.message and str(shared) in refused.value.message


def test_open_private_makes_a_file_0600_new_or_existing_and_leaves_a_device_alone(tmp_path: Path) -> None:
    new = tmp_path / "new"
    old = tmp_path / "old"
    old.write_text("x")
    old.chmod(0o644)
    for path in (new, old):
        os.close(privatefs.open_private(path, os.O_WRONLY))
    assert (_mode(new), _mode(old)) == (0o600, 0o600)
    null_mode = _mode(Path("/dev/null"))
    os.close(privatefs.open_private("/dev/null", os.O_WRONLY))
    assert _mode(Path("/dev/null")) == null_mode  # 0666: a device is never chmod-ed


def test_write_private_and_tighten_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    privatefs.write_private(path, "text")
    assert (path.read_text(), _mode(path)) == ("text", 0o600)
    path.chmod(0o644)
    assert privatefs.tighten_file(path) == 0o644
    assert _mode(path) == 0o600
    assert privatefs.tighten_file(path) is None  # already private
    assert privatefs.tighten_file(tmp_path / "missing") is None

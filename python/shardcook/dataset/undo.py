"""Finalize's undo: the metadata it rewrites (`.nv-meta/`, `.shardcook/finalize.json`, each
shard's `.tar.idx`) is kept aside first, so a finalize that fails, or whose new metadata does not
validate, leaves the folder's metadata byte for byte as it was.

Every writer of these files writes a temporary file and renames it, so the old files are kept as
hard links (copies where the file system has none) in a folder beside them, and put back with a
rename.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from shardcook.errors import DatasetError
from shardcook.layouts.names import FINALIZE_JSON, META_DIR, OURS_DIR


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _keep(path: Path, aside: Path) -> Path | None:
    """`path` (file, folder or link) kept at `aside`; None when there is nothing at `path`."""
    if not os.path.lexists(path):
        return None
    if path.is_dir() and not path.is_symlink():
        shutil.copytree(path, aside, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(path), str(aside))
    return aside


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _targets(root: Path, shards: Sequence[str]) -> list[Path]:
    ours = root / OURS_DIR
    record = ours / FINALIZE_JSON if ours.is_dir() and not ours.is_symlink() else ours
    return [root / META_DIR, record, *(root / f"{shard}.idx" for shard in shards)]


def _cannot_write(root: Path, e: OSError) -> DatasetError:
    return DatasetError(f"cannot write in {root} ({e.strerror or e}); finalize writes its index "
                        "there, so give it a folder it can write to")


@contextmanager
def undone_on_failure(root: Path, shards: Sequence[str]) -> Iterator[None]:
    """Runs the block; if it raises, puts back the metadata of `root` (and the `.tar.idx` of
    `shards`) exactly as it was before the block, then re-raises.

    Raises:
        DatasetError: `root` has no room or no permission for the copy kept aside.
    """
    try:
        aside = Path(tempfile.mkdtemp(prefix=".shardcook-undo-", dir=root))
    except OSError as e:
        raise _cannot_write(root, e) from None
    try:
        try:
            kept = [(path, _keep(path, aside / str(i)))
                    for i, path in enumerate(_targets(root, shards))]
        except OSError as e:
            raise _cannot_write(root, e) from None
        try:
            yield
        except BaseException:
            for path, copy in kept:
                _remove(path)
                if copy is not None:
                    os.replace(copy, path)
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)

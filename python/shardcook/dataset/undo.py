"""Finalize's undo: the metadata it rewrites (`.nv-meta/`, `.shardcook/finalize.json`, each
shard's `.tar.idx`) is kept aside first, so a finalize that fails, or whose new metadata does not
validate, leaves the folder's metadata byte for byte as it was.

Every writer of these files writes a temporary file and renames it, so the old files are kept as
hard links (copies where the file system has none) in a folder beside them, and put back with a
rename. Once everything is kept, a record in that folder lists it; a finalize killed after that
leaves the folder and its record, and the next finalize puts the old files back first
(`finish_interrupted`), as the killed one would have on a failure. Without the record nothing was
written yet, and the folder is only removed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from shardcook.dataset import metadata
from shardcook.errors import DatasetError
from shardcook.files import write_atomic
from shardcook.layouts.names import FINALIZE_JSON, META_DIR, OURS_DIR

log = logging.getLogger(__name__)

#: The start of the name of the folder a finalize keeps the old metadata in, inside the dataset.
UNDO_PREFIX = ".shardcook-undo-"
#: In that folder: what was kept (each target's path in the dataset, and whether it existed).
_RECORD = "kept.json"


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


def _put_back(root: Path, aside: Path, kept: Sequence[tuple[str, bool]]) -> None:
    """Puts the kept targets back, each `aside/<i>` over target i (a target that did not exist
    is removed). A copy already moved back by an earlier, interrupted attempt is not there any
    more, and its target is left as it is."""
    for i, (name, existed) in enumerate(kept):
        copy = aside / str(i)
        if existed and not os.path.lexists(copy):
            continue
        _remove(root / name)
        if existed:
            os.replace(copy, root / name)


def _discard(aside: Path) -> None:
    """Removes the undo folder, its record first: a folder without one is never put back."""
    (aside / _RECORD).unlink(missing_ok=True)
    shutil.rmtree(aside, ignore_errors=True)


def _is_target(root: Path, name: object) -> bool:
    """True for a path finalize keeps aside: `.nv-meta`, `.shardcook` or its finalize.json, a
    shard's `.tar.idx` inside the folder."""
    if not isinstance(name, str):
        return False
    if name in (META_DIR, OURS_DIR, f"{OURS_DIR}/{FINALIZE_JSON}"):
        return True
    parent = (root / name).parent.resolve()
    return (name.endswith(".tar.idx") and not os.path.isabs(name) and ".." not in Path(name).parts
            and parent.is_relative_to(root.resolve()))


def _read_record(root: Path, aside: Path) -> list[tuple[str, bool]]:
    """What the undo folder's record says was kept; empty when there is no record (the finalize
    was killed while keeping, before it wrote anything).

    Raises:
        DatasetError: the record cannot be read, or names anything finalize never keeps.
    """
    try:
        kept = json.loads((aside / _RECORD).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        kept = None  # unreadable: refused below
    if not (isinstance(kept, list) and all(
            isinstance(k, list) and len(k) == 2 and _is_target(root, k[0])
            and isinstance(k[1], bool) for k in kept)):
        raise DatasetError(f"{aside} is left by a finalize that was interrupted, but its record "
                           f"{_RECORD} is damaged or names files finalize never writes, so "
                           "nothing is put back from it; check the folder's metadata, remove "
                           f"{aside} and run `shardcook finalize --force {root}`")
    return [(name, existed) for name, existed in kept]


def interrupted(root: Path) -> list[Path]:
    """The undo folders of finalizes that were killed (or are still running) in `root`."""
    return sorted(p for p in root.glob(f"{UNDO_PREFIX}*") if p.is_dir() and not p.is_symlink())


def finish_interrupted(root: Path) -> None:
    """Puts back the metadata a killed finalize left half written, removes its undo folder and
    the temporary files of writes it cut short, so the next finalize starts from the folder as
    it was."""
    metadata.refuse_links(root)
    for aside in interrupted(root):
        kept = _read_record(root, aside)
        if kept:
            log.warning("a finalize of %s was interrupted; putting its old metadata back", root)
        _put_back(root, aside, kept)
        _discard(aside)
    metadata.remove_stale_temporaries(root)


@contextmanager
def undone_on_failure(root: Path, shards: Sequence[str]) -> Iterator[None]:
    """Runs the block; if it raises, puts back the metadata of `root` (and the `.tar.idx` of
    `shards`) exactly as it was before the block, then re-raises.

    Raises:
        DatasetError: `root` has no room or no permission for the copy kept aside.
    """
    try:
        aside = Path(tempfile.mkdtemp(prefix=UNDO_PREFIX, dir=root))
    except OSError as e:
        raise _cannot_write(root, e) from None
    try:
        try:
            targets = _targets(root, shards)
            kept = [(str(path.relative_to(root)), _keep(path, aside / str(i)) is not None)
                    for i, path in enumerate(targets)]
            write_atomic(aside / _RECORD, json.dumps(kept))
        except OSError as e:
            raise _cannot_write(root, e) from None
        try:
            yield
        except BaseException:
            _put_back(root, aside, kept)
            raise
    finally:
        _discard(aside)

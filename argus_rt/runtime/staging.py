"""Staging directories of task attempts: made by whoever executes the attempt, recycled after a commit.

Every attempt writes into a private, empty directory ``<workspace>/staging/<task id>.<random>``
(:meth:`argus_rt.workspace.Workspace.new_staging` names it). Making a directory and removing it
again costs far more than renaming one on many filesystems (ext4 on this project's CI hosts:
about 300 + 130 us against 30 us), and every task made one and removed one. So after a successful
commit the runtime keeps the emptied directory (:meth:`StagingRecycler.release`) and the next
attempt to start renames it to its own name (:func:`claim_staging`) instead of making a new one.

What stays true: an attempt's directory is empty when its handler starts, is a real directory
(not a symbolic link), and is reachable by its own name only (the rename makes the old name
vanish). Only directories of attempts that finished and were committed are recycled, only while
empty, and only by the runtime that ran them; the rest are removed (or, for failed attempts,
left for :meth:`argus_rt.workspace.Workspace.clean_staging`, as before).
"""
from __future__ import annotations

import collections
import os
import shutil
import stat

SPARE_LIMIT = 64  # emptied directories kept for reuse; beyond that they are removed


def _empty_real_dir(path: str) -> bool:
    """Whether ``path`` is a directory (not a link to one) with nothing in it."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def claim_staging(path, recycled: str | None = None, *, exist_ok: bool = False) -> str:
    """Make ``path`` the attempt's staging directory: ``recycled`` (an emptied staging directory
    from :meth:`StagingRecycler.take`) renamed to it while it is still an empty real directory,
    else a new directory. ``exist_ok``: an existing (empty or not) directory at ``path`` is kept.
    Returns how it was made: ``"recycled"`` or ``"made"``."""
    path = os.fspath(path)
    if recycled is not None:
        try:
            os.rename(recycled, path)  # fails if path exists as a non-empty directory or a file
        except OSError:  # gone (clean_staging ran), or path is taken: make a fresh one below
            try:
                os.rmdir(recycled)  # not left behind when it is still there, empty
            except OSError:
                pass
        else:
            if _empty_real_dir(path):
                return "recycled"
            # something was written into it, or it was swapped for a link, after it was released
            if os.path.islink(path):
                os.unlink(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not (exist_ok and os.path.isdir(path) and not os.path.islink(path)):
            raise
    return "made"


class StagingRecycler:
    """Emptied staging directories of committed attempts, for the next attempts of one runtime.

    Thread-safe: :meth:`keep` runs on the scheduler thread, :meth:`take` on the threads that hand
    jobs to workers."""

    def __init__(self, limit: int = SPARE_LIMIT) -> None:
        self.limit = limit
        self._spare: collections.deque[str] = collections.deque()

    def keep(self, path) -> bool:
        """``path``'s attempt was committed: keep the directory for reuse when it is empty (True);
        False when it is not kept (not empty, not a directory, or enough are kept): remove it then."""
        path = os.fspath(path)
        if len(self._spare) < self.limit and _empty_real_dir(path):
            self._spare.append(path)
            return True
        return False

    def release(self, path) -> None:
        """:meth:`keep` ``path``, or remove it (with what is left in it)."""
        if not self.keep(path):
            shutil.rmtree(path, ignore_errors=True)

    def take(self) -> str | None:
        """An emptied directory to pass to :func:`claim_staging`, or ``None`` when there is none."""
        try:
            return self._spare.popleft()
        except IndexError:
            return None

    def close(self) -> None:
        """Remove the directories still kept (the runtime is closing)."""
        while (path := self.take()) is not None:
            try:
                os.rmdir(path)
            except OSError:
                shutil.rmtree(path, ignore_errors=True)

    def __len__(self) -> int:
        return len(self._spare)

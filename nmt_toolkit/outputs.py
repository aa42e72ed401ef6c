"""Where programs write: the one service that creates and replaces outputs.

One rule holds for every output: **a program deletes only what it wrote.** Three shapes:

* **A file** (:func:`claim_file`, :func:`replace_file`, :class:`ReplacingFile`): written under a temporary name
  beside it, flushed to disk and renamed onto it when complete, so a run that fails leaves the earlier file
  whole. An existing file is replaced only with ``overwrite``, and only when it is recognisably an output of
  the same kind (a checkpoint, say): never a folder, never a file of the user's.
* **A folder written as a whole** (:class:`FolderOutput`: an exported or imported model): written into a
  staging folder beside it and swapped in when complete. An existing folder is replaced only with
  ``overwrite``, and only when it is recognisably an earlier output of the same :class:`OutputKind` that
  holds nothing else; its files are removed one by one, by name, after the new folder is in place.
* **A folder written into** (:func:`claim_folder`: a save dir, a results folder): must be new, empty, or an
  earlier output of its kind (which may hold the user's files beside ours: they are never touched).

A folder output is refused, with or without ``overwrite``, when it is the root folder, the user's home, a
mount point, or the working folder or one of its parents: a program replaces or fills a folder of its own,
never one that holds everything else. A symbolic link is followed: the checks apply to the folder it names.
Refusals are one line naming the option and the path, and come before any work, so nothing is written.

The process's umask decides the modes of what is written (``tempfile`` makes private files and folders,
which are opened up to what ``open``/``mkdir`` would have made).
"""
from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional

from nmt_toolkit.errors import DataError, UsageError

logger = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class OutputKind:
    """What one kind of output looks like on disk, so an earlier one can be told from a user's files.

    ``markers``: name patterns of which at least one marks a folder as an earlier output of this kind (a
    folder output needs all of ``required`` too). ``members``: name patterns of everything the kind writes.
    ``named_by``: the further names an output's own record lists (a manifest), read from the folder."""

    name: str
    markers: tuple[str, ...]
    members: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    named_by: Optional[Callable[[str], Iterable[str]]] = field(default=None, compare=False)

    def _matches(self, name: str, patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    def recognises(self, folder: str, entries: list[str]) -> bool:
        """Whether ``folder`` (holding ``entries``) is an earlier output of this kind."""
        return (all(name in entries for name in self.required)
                and any(self._matches(name, self.markers) for name in entries))

    def foreign(self, folder: str, entries: list[str]) -> list[str]:
        """The entries of ``folder`` this kind does not write (a user's files)."""
        named: set[str] = set()
        if self.named_by is not None:
            try:
                named = {str(n) for n in self.named_by(folder) if n}
            except Exception:  # a damaged record names nothing: its files count as foreign
                named = set()
        return [n for n in entries if n not in named and not self._matches(n, self.markers + self.members)]


# --------------------------------------------------------------------------- places that are never outputs


def current_umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def protected_reason(path: str) -> Optional[str]:
    """Why the folder at ``path`` (a real path) must never be replaced or filled by a program, or None."""
    real = os.path.realpath(path)
    if real == os.path.realpath(os.sep):
        return "the root folder"
    home = os.path.expanduser("~")
    if home and home != "~" and real == os.path.realpath(home):
        return "your home folder"
    cwd = os.path.realpath(os.getcwd())
    if real == cwd:
        return "the working folder"
    if cwd.startswith(real.rstrip(os.sep) + os.sep):
        return "a parent of the working folder"
    if os.path.isdir(real) and os.path.ismount(real):
        return "a mount point"
    return None


def refuse_protected(path: str, shown: str) -> None:
    reason = protected_reason(path)
    if reason:
        raise UsageError(f"{shown}: is {reason}; a program writes its outputs into a folder of their own: name a "
                         f"new folder (e.g. {os.path.join(shown.split(' ', 1)[-1], 'out')})")


def _entries(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        raise DataError(f"{folder}: cannot read the folder ({exc.strerror})") from None


def _listing(names: list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def check_writable_place(real: str, shown: str) -> None:
    """The nearest existing folder above ``real`` lets us create ``real`` (or a staging folder beside it): a
    probe folder is made there and removed, so nothing is left and the answer is the file system's."""
    existing = os.path.dirname(real)
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise DataError(f"{shown}: {existing} is a file, not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-test.", dir=existing))
    except OSError as exc:
        raise DataError(f"{shown}: cannot write there ({os_reason(exc)})") from None


# --------------------------------------------------------------------------- files


def claim_file(path: str, overwrite: bool, shown: str, is_own: Callable[[str], bool], what: str) -> None:
    """Check, before any work, that ``path`` may be written as a file: not a folder; an existing file only
    with ``overwrite`` and only when ``is_own(path)`` says it is ``what`` (an earlier output of ours); its
    folder writable. ``shown`` is the option and path as the user gave them."""
    if os.path.isdir(path):
        raise DataError(f"{shown}: is a folder; give the file name to write")
    if os.path.lexists(path):
        if not overwrite:
            raise UsageError(f"{shown}: exists; add --overwrite to replace it, or choose another file")
        if not os.path.isfile(path) or not is_own(path):
            raise DataError(f"{shown}: exists and is not {what}; refusing to replace it (choose another file)")
    check_writable_place(os.path.realpath(path), shown)


def replace_file(path: str, write: Callable, what: str = "the file") -> None:
    """Call ``write(handle)`` on a temporary file beside ``path``, flush it to disk and rename it onto
    ``path``. A failed write (a full disk, a size limit) removes the temporary file, leaves an earlier
    ``path`` whole and is one DataError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=TEMP_SUFFIX, dir=folder)
    except OSError as exc:
        raise DataError(f"{path}: cannot write {what} ({os_reason(exc)})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        reason = os_reason(exc, folder)  # before the temporary file goes: a full disk has room again after
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, (OSError, RuntimeError)):  # torch's zip writer reports a failed write as RuntimeError
            kept = " (the previous file is intact)" if os.path.exists(path) else ""
            raise DataError(f"{path}: writing {what} failed: {reason}{kept}") from None
        raise
    _sync_folder(folder)


def write_text(path: str, text: str, what: str = "the file") -> None:
    """A small text file (a config, a record), replaced atomically as :func:`replace_file` does."""
    replace_file(path, lambda handle: handle.write(text.encode("utf-8")), what)


def _sync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable."""
    try:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


#: less free space than this in the folder of a failed write means the disk filled up
_FULL_DISK_BYTES = 1 << 20


def os_reason(exc: BaseException, folder: Optional[str] = None) -> str:
    """``No space left on device``: the OS's words, without the errno prefix and the file name again.

    torch's zip writer reports the OS's error as ``[enforce fail at inline_container.cc…] unexpected pos``;
    the free space left in ``folder`` then tells a full disk from other failures."""
    import errno

    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, RuntimeError) and folder is not None:
        try:
            stat = os.statvfs(folder)
            if stat.f_bavail * stat.f_frsize < _FULL_DISK_BYTES:
                return os.strerror(errno.ENOSPC)
        except OSError:
            pass
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__


class ReplacingFile:
    """A UTF-8 text file written under a temporary name in ``path``'s folder and renamed over ``path`` by
    :meth:`close`: a run that fails half way leaves an earlier ``path`` whole, and the temporary file goes
    away with this object (when the exception has unwound)."""

    def __init__(self, path: str):
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=TEMP_SUFFIX,
                                   dir=os.path.dirname(os.path.abspath(path)))
        self._handle = os.fdopen(fd, "w", encoding="utf-8")
        self._path, self._tmp = path, tmp
        self._discard = weakref.finalize(self, _discard_file, self._handle, tmp)

    def write(self, text: str) -> int:
        return self._handle.write(text)

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()
        os.chmod(self._tmp, 0o666 & ~current_umask())
        os.replace(self._tmp, self._path)
        self._discard.detach()

    def discard(self) -> None:
        """Remove the temporary file now (after a failed write); ``path`` keeps what it held."""
        self._discard()


def _discard_file(handle, path: str) -> None:
    with contextlib.suppress(OSError):
        handle.close()  # flushing what is buffered fails again on a full disk; the file is closed all the same
    with contextlib.suppress(OSError):
        os.unlink(path)


# --------------------------------------------------------------------------- folders written into


def check_folder(path: str, kind: OutputKind, shown: str) -> None:
    """Refuse, writing nothing, a folder a program would write files into (the user's files beside ours
    stay) unless it is new, empty, or an earlier output of ``kind``; never a protected place."""
    refuse_protected(path, shown)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise DataError(f"{shown}: exists and is not a folder")
    if os.path.isdir(path):
        entries = _entries(path)
        if entries and not kind.recognises(path, entries):
            raise DataError(f"{shown}: a non-empty folder that is not {kind.name} (it holds {_listing(entries)}); "
                            f"name a new or empty folder")
    else:
        check_writable_place(os.path.realpath(path), shown)


def claim_folder(path: str, kind: OutputKind, shown: str) -> str:
    """:func:`check_folder`, then create the folder and make sure a file can be written in it (a probe), so
    an unwritable folder is refused before hours of work, not after. Returns the path."""
    check_folder(path, kind, shown)
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", suffix=TEMP_SUFFIX, dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DataError(f"{shown}: cannot write there ({os_reason(exc)})") from None
    return path


# --------------------------------------------------------------------------- folders written as a whole


class FolderOutput:
    """A folder a program writes as a whole, claimed before the work starts.

    ``FolderOutput(path, kind, overwrite, shown)`` makes every refusal at once; ``with output.staged() as
    folder:`` yields a new private folder beside the target to write into, and swaps it in when the block
    ends without an error (or removes it, when it raises)."""

    def __init__(self, path: str, kind: OutputKind, overwrite: bool, shown: Optional[str] = None):
        self.path, self.kind, self.overwrite = os.fspath(path), kind, overwrite
        self.shown = shown or self.path
        self.target = os.path.realpath(self.path)
        self.check()

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def check(self) -> list[str]:
        """Refuse a target that may not be replaced; returns the entries of an earlier output to replace."""
        refuse_protected(self.path, self.shown)
        if os.path.lexists(self.target) and not os.path.isdir(self.target):
            raise DataError(f"{self.shown}: exists and is not a folder")
        check_writable_place(self.target, self.shown)
        entries = _entries(self.target) if os.path.isdir(self.target) else []
        if not entries:
            return []
        if not self.kind.recognises(self.target, entries):
            raise DataError(f"{self.shown}: a non-empty folder that is not {self.kind.name} (it holds "
                            f"{_listing(entries)}); nothing was written: name a new or empty folder")
        foreign = self.kind.foreign(self.target, entries)
        if foreign:
            raise DataError(f"{self.shown}: holds {_listing(foreign)}, which {'is' if len(foreign) == 1 else 'are'} "
                            f"not part of {self.kind.name}; nothing was replaced: move {'it' if len(foreign) == 1 else 'them'} "
                            f"away or name another folder")
        if not self.overwrite:
            raise DataError(f"{self.shown}: holds {self.kind.name} already; add --overwrite to replace it, or name "
                            f"another folder")
        return entries

    @contextlib.contextmanager
    def staged(self) -> Iterator[str]:
        parent = os.path.dirname(self.target)
        staging = staging_beside(self.target, self.shown)
        try:
            yield staging
            self._swap_in(staging)
        except BaseException as exc:
            discard_staging(staging)
            if isinstance(exc, OSError):
                raise DataError(f"{self.shown}: writing failed: {os_reason(exc, parent)}") from None
            raise

    def _swap_in(self, staging: str) -> None:
        """Rename the complete staging folder onto the target; an earlier output is set aside first and its
        files removed by name only once the new folder is in place."""
        open_up(staging)
        old = self.check()  # again: the folder may have changed while the work ran
        if not old:
            os.replace(staging, self.target)  # a rename onto a missing or empty folder
            _sync_folder(os.path.dirname(self.target))
            return
        aside = _fresh_name(self.target, "old")
        os.replace(self.target, aside)
        try:
            os.replace(staging, self.target)
        except OSError:
            os.replace(aside, self.target)
            raise
        _sync_folder(os.path.dirname(self.target))
        remove_entries(aside, old)


def as_output(output, kind: OutputKind, overwrite: bool) -> FolderOutput:
    """``output`` as a claimed :class:`FolderOutput` (a path is claimed here, named by itself in messages)."""
    return output if isinstance(output, FolderOutput) else FolderOutput(output, kind, overwrite)


def staging_beside(target: str, shown: str) -> str:
    """A new private folder beside ``target`` (one file system: the final moves are renames), named after it
    and this process, so the staging folders of a run that was killed can be told and removed."""
    parent = os.path.dirname(os.path.abspath(target))
    try:
        os.makedirs(parent, exist_ok=True)
        remove_abandoned(target)
        return tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.tmp-{os.getpid()}-", dir=parent)
    except OSError as exc:
        raise DataError(f"{shown}: cannot write there ({os_reason(exc)})") from None


def discard_staging(path: str) -> None:
    """Remove a staging or temporary folder this process made for itself (never a folder a user named)."""
    shutil.rmtree(path, ignore_errors=True)


def _fresh_name(target: str, what: str) -> str:
    path = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.{what}-{os.getpid()}-",
                            dir=os.path.dirname(os.path.abspath(target)))
    os.rmdir(path)  # a name no one uses, free again for a rename
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or a number no process has: leave the folder alone
    return True


def remove_abandoned(target: str) -> list[str]:
    """Remove the staging and set-aside folders beside ``target`` that a killed run left (kill -9, a lost
    node): ``.NAME.tmp-PID-…`` and ``.NAME.old-PID-…``, made by this module, whose process is gone. A folder
    whose process still runs belongs to a run in progress and stays. Returns the removed paths."""
    import re

    parent, base = os.path.dirname(os.path.abspath(target)), os.path.basename(target)
    pattern = re.compile(rf"\.{re.escape(base)}\.(tmp|old)-(\d+)-")
    removed = []
    for name in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        m = pattern.match(name)
        path = os.path.join(parent, name)
        if m and os.path.isdir(path) and not os.path.islink(path) and not _alive(int(m.group(2))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            logger.info("removed %s, left by a run that was interrupted", path)
    return removed


def merge_into(staging: str, target: str, replaced: Callable[[str], bool]) -> None:
    """Move the finished entries of ``staging`` into the existing folder ``target`` (a rename of the whole
    folder when ``target`` does not exist yet).

    The entries ``replaced(name)`` picks (the same names, and whatever else of ours the new set replaces)
    are first renamed into a folder set aside beside ``target``; if a rename fails every move is undone, so
    ``target`` holds either the old set or the new one. The user's other entries are never touched."""
    open_up(staging)
    if not os.path.exists(target):
        os.rename(staging, target)
        os.makedirs(staging)  # so the caller's cleanup finds something to remove
        return
    new = set(os.listdir(staging))
    aside = _fresh_name(target, "old")
    os.mkdir(aside)
    moved_out: list[str] = []
    moved_in: list[str] = []
    try:
        for name in sorted(os.listdir(target)):
            if name in new or replaced(name):
                os.rename(os.path.join(target, name), os.path.join(aside, name))
                moved_out.append(name)
        for name in sorted(new):
            os.rename(os.path.join(staging, name), os.path.join(target, name))
            moved_in.append(name)
    except OSError:
        for name in moved_in:
            os.rename(os.path.join(target, name), os.path.join(staging, name))
        for name in moved_out:
            os.rename(os.path.join(aside, name), os.path.join(target, name))
        os.rmdir(aside)
        raise
    _sync_folder(target)
    remove_entries(aside, moved_out)


def remove_entries(folder: str, names: Iterable[str]) -> None:
    """Remove the named entries of ``folder`` (an earlier output, set aside) and then the folder, if empty.
    Anything else found there stays, and is reported."""
    with contextlib.suppress(OSError):
        remove_entries_only(folder, names)
    try:
        os.rmdir(folder)
    except OSError:
        logger.warning("%s: kept (it holds files the earlier output did not list)", folder)


def open_up(folder: str) -> None:
    """Give a staging folder and what is in it the modes ``mkdir``/``open`` would have (the umask's)."""
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~mask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)


# --------------------------------------------------------------------------- work folders of example scripts

#: the file that marks a folder as an example script's work folder; its first line names the script
WORKDIR_MARKER = ".nmt-workdir"


def claim_workdir(path: str, owner: str, entries: Iterable[str], keep: bool, shown: str) -> None:
    """Make ``path`` the work folder of the script ``owner``, which writes the ``entries`` (names or name
    patterns, ``test.*``) inside it.

    A new or empty folder becomes the script's (marked with :data:`WORKDIR_MARKER`); a folder the same script
    marked before is reused, its ``entries`` removed first unless ``keep``; anything else non-empty, and any
    protected place, is refused. So a script removes only what it wrote, never a folder a user named."""
    refuse_protected(path, shown)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise DataError(f"{shown}: exists and is not a folder")
    check_writable_place(os.path.realpath(path), shown)
    found = _entries(path) if os.path.isdir(path) else []
    if found and _workdir_owner(path) != owner:
        raise DataError(f"{shown}: a non-empty folder that {owner} did not make (it holds {_listing(found)}); "
                        f"name a new or empty folder")
    owned = [name for name in found if any(fnmatch.fnmatchcase(name, p) for p in entries if "/" not in p)]
    if found and not keep:
        remove_entries_only(path, owned)
    os.makedirs(path, exist_ok=True)
    write_text(os.path.join(path, WORKDIR_MARKER), owner + "\n", "the work folder's marker")


def _workdir_owner(path: str) -> Optional[str]:
    try:
        with open(os.path.join(path, WORKDIR_MARKER), encoding="utf-8") as handle:
            return handle.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None


def remove_entries_only(folder: str, names: Iterable[str]) -> None:
    """Remove the named entries of ``folder`` (a script's own results inside its marked work folder)."""
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)

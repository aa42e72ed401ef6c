"""The files of a folder a user names (a model folder, a Hugging Face folder, a CTranslate2 export, a
data-bin) stay inside it: a file there that is a symbolic link leading out of the folder is refused, so a
folder cannot make a program read, copy or decode ``/etc/passwd`` or another model's weights under its own
name. Links between the folder's own files are fine.

One exception, for Hugging Face's download cache, whose ``snapshots/<revision>/`` folders hold nothing but
links into the repository's ``blobs/`` folder: a link from such a folder into that ``blobs/`` stays inside.
"""
from __future__ import annotations

import os

from nmt_toolkit.errors import DataError


def _roots(folder: str) -> list[str]:
    real = os.path.realpath(folder)
    roots = [real]
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots":  # a Hugging Face cache snapshot: links into ../../blobs
        roots.append(os.path.join(os.path.dirname(parent), "blobs"))
    return roots


def leads_out(folder: str, path: str) -> bool:
    """Whether ``path`` (a file of ``folder``) resolves, through links, to a place outside ``folder``."""
    target = os.path.realpath(path)
    return not any(os.path.commonpath([target, root]) == root for root in _roots(folder))


def check_inside(folder: str, path: str, what: str = "") -> str:
    """``path`` if it resolves inside ``folder``, else a DataError naming it (``what`` it is) and where it leads."""
    if leads_out(folder, path):
        raise DataError(f"{path}{f' ({what})' if what else ''}: a link leading out of {folder} (to "
                        f"{os.path.realpath(path)}); a folder's files must be inside it (copy the file in)")
    return path


def member(folder: str, name: str, what: str = "") -> str:
    """``folder/name``, checked by :func:`check_inside`."""
    return check_inside(folder, os.path.join(folder, name), what)

"""Where pipi's files live: the package, the project checkout and ``PIPI_HOME``; and the one
place a name that comes from data (a class, a source, a file name) becomes part of a path or a
metric key:

* :func:`path_part` refuses, in one line, anything that is not a safe single path component
  (separators, ``.``/``..``, control characters, a leading dot, over :data:`MAX_PART` characters):
  a label table's cell must never name a place outside the output folder.
* :func:`metric_key` makes any Unicode name a part MLflow accepts in a metric key (letters,
  digits, ``_ - . space / :``; everything else becomes ``_``): ``Ulcer (active)`` ->
  ``Ulcer _active_``. The class name itself stays what the clinician wrote; a run records the
  key -> name mapping where they differ (:func:`metric_keys`).
* :func:`twins` finds names a case-insensitive disk cannot tell apart.
* :func:`inside` checks that a path resolves inside a folder before anything is written there.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import time
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from pipi.errors import DataError

#: The ``pipi`` package folder (shipped with logged models as code).
PACKAGE_DIR = Path(__file__).resolve().parent
#: The project checkout holding ``MLproject`` (``mlflow run .`` runs from here).
PROJECT_ROOT = PACKAGE_DIR.parent


def pipi_home() -> Path:
    """Where pipi keeps generated data and caches: ``$PIPI_HOME`` or ``./.pipi``."""
    return Path(os.environ.get("PIPI_HOME") or Path.cwd() / ".pipi").resolve()


def staging_dir(out: Path, suffix: str = ".staging") -> Path:
    """A fresh temporary folder beside ``out`` (moved into place when the work is done).

    Its name says who made it (``.<out>.<host>-<pid>-XXXX<suffix>``): the folders that an
    earlier staging of the same ``out`` left behind when it was killed (SIGKILL, a crash of
    the machine) are removed first, the ones of a staging that is still going are kept.

    Raises :class:`~pipi.errors.DataError` naming ``out`` when its parent cannot be created
    or written (a read-only or virtual file system such as ``/proc``).
    """
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(out, suffix)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.{_HOST}-{os.getpid()}-",
                                     suffix=suffix, dir=out.parent))
    except OSError as exc:
        raise DataError(f"--out {out}: cannot write there ({exc.strerror or exc}); choose a "
                        "writable folder") from None


def publish_dir(tmp: Path, out: Path, *, doing: str = "staging") -> None:
    """Rename the finished folder ``tmp`` (made by :func:`staging_dir`) to ``out``.

    An empty folder at ``out`` is replaced; anything else there (made by someone else while
    we were ``doing`` our work) is refused with a :class:`~pipi.errors.DataError`.
    """
    out = Path(out)
    if out.exists():
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        else:
            raise DataError(f"{out} was created by someone else while {doing}; not replacing it")
    os.replace(tmp, out)


_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"
#: a staging folder of an older pipi (no owner in its name) untouched this long is stale
LEGACY_STALE_S = 3600.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_stale_staging(out: Path, suffix: str = ".staging") -> list[Path]:
    """Remove the temporary folders of stagings of ``out`` whose process is gone.

    A folder made on this host is stale when its process no longer exists; one made on
    another host (a shared file system) or by an older pipi (no owner in its name) when
    nothing in it changed for :data:`LEGACY_STALE_S`. Returns the folders removed.
    """
    out = Path(out)
    owned = re.compile(re.escape(f".{out.name}.") + r"(?:(?P<host>\w+)-(?P<pid>\d+)-)?"
                       r"[a-z0-9_]{8}" + re.escape(suffix) + "$")
    removed = []
    with contextlib.suppress(OSError):
        candidates = list(out.parent.iterdir())
        for path in candidates:
            m = owned.match(path.name)
            if m is None or not path.is_dir():
                continue
            if m["host"] == _HOST:
                stale = not _pid_alive(int(m["pid"]))
            else:
                stale = time.time() - path.stat().st_mtime > LEGACY_STALE_S
            if stale:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


# --------------------------------------------------------------------------- names from data
#: The longest name accepted as one path component (file systems allow 255 bytes; the staged
#: path adds the split, class and source folders).
MAX_PART = 100
#: The source of an image where some images of a dataset name a source and it does not.
UNKNOWN_SOURCE = "unknown"

_METRIC_UNSAFE = re.compile(r"[^\w\-. /:]")


def path_part(name: str, what: str) -> str:
    """``name`` when it is a safe single path component; else a :class:`DataError` in one line
    that starts with ``what`` (the file and row, or the option, it came from, and what the name
    is: ``"labels.csv, line 5: class"``)."""
    s = str(name)
    why = None
    if not s.strip():
        why = "is empty"
    elif s in (".", "..") or "/" in s or "\\" in s:
        why = "is not a single folder or file name (no '/', '\\', '.' or '..')"
    elif any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in s):
        why = "holds a control character"
    elif s.startswith("."):
        why = "starts with a dot (a hidden file)"
    elif len(s) > MAX_PART:
        why = f"is {len(s)} characters long (at most {MAX_PART})"
    elif s != s.strip():
        why = "starts or ends with a space"
    if why is not None:
        shown = s if len(s) <= 60 else s[:57] + "..."
        raise DataError(f"{what} {shown!r} {why}; rename it")
    return s


def metric_key(name: str) -> str:
    """``name`` as a part of an MLflow metric key (see the module docstring)."""
    return _METRIC_UNSAFE.sub("_", str(name))


def metric_keys(names: Iterable[str]) -> dict[str, str]:
    """``{metric key: name}`` for the names whose key differs from the name; a
    :class:`DataError` when two names share a key (they would share metrics)."""
    seen: dict[str, str] = {}
    for n in names:
        k = metric_key(n)
        if k in seen and seen[k] != n:
            raise DataError(f"the class names {seen[k]!r} and {n!r} give the same metric key "
                            f"{k!r}; rename one of them")
        seen[k] = n
    return {k: n for k, n in seen.items() if k != n}


def twins(names: Iterable[str]) -> tuple[str, str] | None:
    """The first two distinct names that differ only in case (Unicode case folding), else
    None."""
    seen: dict[str, str] = {}
    for n in names:
        key = unicodedata.normalize("NFC", str(n)).casefold()
        if key in seen and seen[key] != n:
            return seen[key], n
        seen.setdefault(key, n)
    return None


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (resolved, links followed) lies inside ``folder`` or is it."""
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)

"""Where pipi's files live: the package, the project checkout and ``PIPI_HOME``."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import time
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

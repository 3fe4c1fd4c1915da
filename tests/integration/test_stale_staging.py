"""A staging killed mid-way leaves its hidden temporary folder; the next staging of the same
target removes it, and keeps the one of a staging that is still going (issue 24)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipi.data.staging import load_staged, stage_kvasir
from pipi.paths import staging_dir

ROOT = Path(__file__).resolve().parents[2]

KILLED_MID_WAY = """
import os, signal, sys
from pathlib import Path
from pipi.paths import staging_dir
tmp = staging_dir(Path(sys.argv[1]))
(tmp / "half.jpg").write_bytes(b"x" * 1000)
print(tmp, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _hidden(out: Path) -> list[Path]:
    return sorted(p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def test_next_staging_removes_the_folder_of_a_killed_one(tiny_release, tmp_path):
    out = tmp_path / "staged"
    r = subprocess.run([sys.executable, "-c", KILLED_MID_WAY, str(out)], check=False, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == -9
    left = Path(r.stdout.strip())
    assert left.is_dir() and left.name.endswith(".staging")
    # a new staging of the same target removes the dead one's folder as it starts ...
    live = staging_dir(out)
    assert not left.exists()
    # ... and a staging that is still going (this process) keeps its folder
    (live / "part.jpg").write_bytes(b"y")
    # a folder of an older target name is not touched
    other = staging_dir(tmp_path / "staged-other")
    res = stage_kvasir(tiny_release / "labelled_images", tiny_release / "metadata.csv", out,
                       seed=1, progress=False)
    load_staged(out)
    assert res.data_digest
    assert _hidden(out) == [live]  # only the live staging's folder is left
    assert other.is_dir()

"""A real one-node SLURM cluster on loopback for tests (munged + slurmctld + slurmd).

Follows platform.md: root, munged on its own socket, ``SlurmctldHost=<hostname>(127.0.0.1)``,
``AuthInfo=socket=...``, proctrack/linuxproc, task/none, cons_tres, ``config_overrides``
(the node may declare more CPUs than it has), state and logs under a temporary folder,
``SLURM_CONF`` pointing at the generated slurm.conf. Finished jobs stay visible to
``scontrol`` for an hour (``MinJobAge``); job completions also go to a jobcomp text file.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")


def missing_tools() -> list[str]:
    return [d for d in DAEMONS if shutil.which(d) is None
            and not Path("/usr/sbin", d).is_file()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """Start with ``SlurmCluster(root, cpus=2)``; ``env`` holds ``SLURM_CONF``; ``stop()``."""

    def __init__(self, root: Path, *, cpus: int = 2, timeout: float = 60.0):
        self.root = Path(root)
        self.procs: list[subprocess.Popen] = []
        for d in ("state", "spool", "log", "munge"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.host = socket.gethostname().split(".")[0]
        munge = self.root / "munge"
        os.chmod(munge, 0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = munge / "munge.socket"
        self._start([_which("munged"), "--foreground", f"--socket={self.munge_socket}",
                     f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}",
                     f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'seed'}",
                     "--force"], "munged")
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged socket")
        ctl_port, d_port = _free_port(), _free_port()
        self.conf = self.root / "slurm.conf"
        self.conf.write_text("\n".join([
            "ClusterName=pipitest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={ctl_port}",
            f"SlurmdPort={d_port}",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root", "SlurmdUser=root",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides", "MailProg=/bin/true",
            "ReturnToService=2", "MinJobAge=3600", "SchedulerType=sched/backfill",
            "JobCompType=jobcomp/filetxt", f"JobCompLoc={self.root / 'log' / 'jobcomp.txt'}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd.log'}",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._start([_which("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._start([_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.host], "slurmd")
        self._wait(self._idle, timeout, "an idle SLURM node")

    def _start(self, cmd: list[str], name: str) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "wb")  # noqa: SIM115
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True, env={**os.environ,
                                           "SLURM_CONF": str(getattr(self, "conf", ""))}))

    def _idle(self) -> bool:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}; see {self.root}/log")
        r = subprocess.run([_which("sinfo"), "-h", "-o", "%T"], capture_output=True, text=True,
                           env=self.env, check=False)
        return r.returncode == 0 and r.stdout.strip().startswith("idle")

    @staticmethod
    def _wait(pred, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return
            time.sleep(0.3)
        raise TimeoutError(f"no {what} within {timeout} s")

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=15)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)

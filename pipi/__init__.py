"""pipi: training-time optical priors for wireless capsule endoscopy, on MLflow."""

import os

# OpenMP threads that spin while waiting turn a busy 2-core machine (a tracking server, a
# DataLoader, another job) into a 10-20x slowdown of CPU training; passive waiting costs
# nothing measurable when the machine is quiet. Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

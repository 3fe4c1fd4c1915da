"""Run services every workflow shares: resolve staged data (:mod:`pipi.runs.data`), load run
sets (:mod:`pipi.runs.runsets`) and their predictions (:mod:`pipi.runs.evidence`), score a
finished run under a transform (:mod:`pipi.runs.evaluate`, :mod:`pipi.runs.children`), the
sequence cells' feature streams (:mod:`pipi.runs.streams`), the prior parameters a run uses
(:mod:`pipi.runs.prior_params`), Grad-CAM children (:mod:`pipi.runs.gradcam`), the runs of
calibrate's trials (:mod:`pipi.runs.calibrate`) and training a cell (:mod:`pipi.runs.training`),
which train, ablate and calibrate call alike."""

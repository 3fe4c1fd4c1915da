"""Run services every workflow shares: resolve staged data (:mod:`pipi.runs.data`), load run
sets (:mod:`pipi.runs.runsets`) and their predictions (:mod:`pipi.runs.evidence`), score a
finished run under a transform (:mod:`pipi.runs.evaluate`, :mod:`pipi.runs.children`), the
sequence cells' feature streams (:mod:`pipi.runs.streams`), the prior parameters a run uses
(:mod:`pipi.runs.prior_params`), Grad-CAM children (:mod:`pipi.runs.gradcam`) and the runs of
calibrate's trials (:mod:`pipi.runs.calibrate`)."""

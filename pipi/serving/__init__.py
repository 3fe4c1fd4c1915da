"""What a registered model runs and accepts: request decoding (:mod:`pipi.serving.model_input`)
and the sequence-cell clip predictor (:mod:`pipi.serving.sequence_clip`)."""

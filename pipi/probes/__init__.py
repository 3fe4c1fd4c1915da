"""Probes of a trained model: test-time adaptation (:mod:`pipi.probes.tta`), image
perturbations (:mod:`pipi.probes.perturb`) and Grad-CAM (:mod:`pipi.probes.gradcam`)."""

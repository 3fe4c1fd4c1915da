"""Synthetic capsule-endoscopy releases in the exact on-disk formats of the real ones.

Nobody running pipi needs the real data to try it: ``synthesize_kvasir`` writes a
Kvasir-Capsule-format release and ``synthesize_galar`` a Galar-format one (formats in
``reference/datasets.md``), rendered by :mod:`pipi.data.synth.render` (scenes in ``scene``, findings painted by
``paint``). The Kvasir writer lives in :mod:`pipi.data.synth.kvasir`, the Galar writer in
:mod:`pipi.data.synth.galar`, the pieces both share in :mod:`pipi.data.synth.common`;
everything public is importable from here.

Kvasir-Capsule format::

    OUT/labelled_images/<class folder, cased as in the real zip>/<16-hex video id>_<frame>.jpg
    OUT/metadata.csv   semicolon-delimited, header
                       filename;video_id;frame_number;finding_category;finding_class;x1;...;y4

Galar format::

    OUT/metadata.csv          File Name, Capsule System, Gender, Age (one row per video)
    OUT/Labels/<id>.csv       one row per frame, 27 columns (or 32 with the technical ones)
    OUT/Frames/<id or %03d>/frame_<frame:06d>.PNG

Design of the data (what downstream code may rely on):

* **Videos are patients.** Each video has its own appearance (mucosa colour, brightness,
  villus scale, bile, debris, bubbles). Frames of a video come in *segments*: runs of
  consecutive frame numbers showing one finding on one drifting scene, separated by gaps (or
  not), so temporal windows carry information.
* **Class balance** follows the shape of the paper's count table (Normal dominant; Ampulla of
  Vater, Blood - hematin and Polyp each in a single video), compressed so that every one of
  the 11 evaluable classes lives in at least ``MIN_VIDEOS_PER_CLASS`` videos and a seeded
  patient-disjoint 70/15/15 split can put positives of each in validation and test.
* **Multilabel frames**: a few frames carry an anatomical landmark and a finding (e.g.
  Pylorus + Erosion), listed on two metadata rows and stored in both class folders, as in the
  real release.
* **Determinism**: the plan comes from one generator seeded by ``seed``; each video is
  rendered from its own generator seeded by ``(seed, video index)``, so the bytes do not
  depend on the number of worker processes.
* **Atomic output**: everything is written into a temporary directory beside ``out`` and
  renamed into place at the end; a non-empty ``out`` is never touched.
"""

from pipi.data.synth.common import SynthPreset
from pipi.data.synth.galar import (
    GALAR_CAPSULE_SYSTEMS,
    GALAR_HEADER_27,
    GALAR_HEADER_32,
    GALAR_PRESETS,
    GALAR_TO_KVASIR,
    synthesize_galar,
)
from pipi.data.synth.kvasir import (
    KVASIR_HEADER,
    KVASIR_PRESETS,
    MIN_VIDEOS_PER_CLASS,
    synthesize_kvasir,
)

__all__ = [
    "GALAR_CAPSULE_SYSTEMS",
    "GALAR_HEADER_27",
    "GALAR_HEADER_32",
    "GALAR_PRESETS",
    "GALAR_TO_KVASIR",
    "KVASIR_HEADER",
    "KVASIR_PRESETS",
    "MIN_VIDEOS_PER_CLASS",
    "SynthPreset",
    "synthesize_galar",
    "synthesize_kvasir",
]

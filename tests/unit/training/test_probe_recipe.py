"""Issue 28: the foundation probes as the authors ran them: features extracted once and
cached by digest, the linear head trained on them with the published scripts' recipes; the
earlier through-the-model recipe as probe_recipe=end_to_end."""

from __future__ import annotations


from pipi.config import make_config

SMOKE = {"cell": "probe", "profile": "smoke", "weights": "none", "seed": 41}


def test_the_published_probe_recipes_are_the_default():
    """dinov2_linear_probe.py: 40 epochs, batch 512, lr 1e-3, wd 1e-4, class weights;
    biomedclip_linear_probe.py: 80 epochs, batch 256, lr 5e-4, wd 1e-3, none; both without
    augmentation, best epoch of all."""
    d = make_config(cell="probe", backbone="dinov2_vitb14")
    b = make_config(cell="probe", backbone="biomedclip_vitb16")
    assert (d.epochs, d.batch_size, d.lr, d.weight_decay, d.class_weights, d.augment,
            d.patience, d.probe_recipe) == (40, 512, 1e-3, 1e-4, True, False, 40, "cached")
    assert (b.epochs, b.batch_size, b.lr, b.weight_decay, b.class_weights, b.augment,
            b.patience) == (80, 256, 5e-4, 1e-3, False, False, 80)
    # issue 42: the rest of each script's recipe (the end-to-end recipe has none of it)
    assert (d.lr_schedule, d.select_metric, d.probe_transform, d.probe_fp16) == (
        "cosine", "macro_auc", "dinov2", False)
    assert (b.lr_schedule, b.select_metric, b.probe_transform, b.probe_fp16) == (
        "constant", "macro_f1", "biomedclip", True)
    e = make_config(cell="probe", backbone="biomedclip_vitb16", probe_recipe="end_to_end")
    assert (e.epochs, e.batch_size, e.lr, e.class_weights, e.augment) == (30, 32, 1e-3, True,
                                                                          True)
    assert (e.lr_schedule, e.select_metric, e.probe_transform) == ("cosine", "macro_auc",
                                                                     "frame")
    from pipi.config import run_params
    assert "lr_schedule" not in run_params(make_config(cell="a"))   # quiet at their defaults
    assert run_params(b)["lr_schedule"] == "constant"
    w = make_config(cell="probe", backbone="dinov2_vitb14", weight_decay=0.05,
                    class_weights=False)
    assert (w.weight_decay, w.class_weights, w.epochs) == (0.05, False, 40)
    assert make_config(cell="a").class_weights and make_config(cell="a").augment

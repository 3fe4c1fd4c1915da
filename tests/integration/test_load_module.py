"""The torch module of a registered model in reach (issue 40 item 5):
``pipi.tracking.scoring.load_module(uri)`` returns a ``FrameModule`` whose forward on RGB in
[0, 1] gives the pyfunc's probabilities; a sequence model is refused in one line."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from pipi.config import make_config
from pipi.errors import ConfigError
from pipi.serving.model_input import encode_png
from pipi.tracking.scoring import load_module
from pipi.runs.training import train

pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("test_load_module")]


def test_the_module_gives_the_pyfuncs_probabilities(training_store, tiny_staged):
    cfg = make_config(cell="pi", backbone="resnet18", profile="smoke", weights="none",
                      image_size=32, seed=3)
    s = train(cfg, experiment="load-module", data=str(tiny_staged), progress=False)
    uri = f"models:/{s.registered_name}/{s.registered_version}"
    module = load_module(uri)
    assert module.class_names[0] == "Ampulla of Vater" and module.image_size == 32
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    paths = frames.loc[frames["split"] == "test", "path"].iloc[:12]
    imgs = [np.asarray(Image.open(tiny_staged / p).convert("RGB").resize((32, 32),
                                                                         Image.BILINEAR))
            for p in paths]
    served = mlflow.pyfunc.load_model(uri).predict(
        pd.DataFrame({"image": [encode_png(im) for im in imgs]}))
    with torch.no_grad():
        x01 = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).float() / 255
        got = module(x01).numpy()
    want = served[list(module.class_names)].to_numpy()
    assert want.std(0).max() > 1e-3   # the frames are told apart
    np.testing.assert_allclose(got, want, atol=1e-5)
    # the bare network and its transform are there too
    assert isinstance(module.network, torch.nn.Module)
    seq = train(make_config(cell="b", backbone="resnet18", profile="smoke", weights="none",
                            image_size=32, seed=3), experiment="load-module",
                            data=str(tiny_staged), progress=False)
    with pytest.raises(ConfigError, match="a sequence cell's model \\(b: it takes clips\\)"):
        load_module(f"models:/{seq.registered_name}/{seq.registered_version}")

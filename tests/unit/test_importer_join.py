"""`import`: outside checkpoints and prediction files as MLflow runs (docs/import.md).

Checkpoints are fresh torchvision models (weights=None) saved in the forms released code
writes (plain, DataParallel's ``module.``, a Lightning-style ``model.``); prediction files
are written here with pandas/numpy, never by pipi. Each run is checked against the file
and the staged test split, with expectations computed here (torchvision forward pass,
scikit-learn AUC), and a bad file must leave the tracking store untouched.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pipi.classes import CLASSES
from pipi.errors import DataError


def _staged_like(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["path", "filename", "video_id", "frame_number",
                                       "split"])


def test_a_frame_staged_under_two_labels_takes_its_one_prediction_row(tmp_path):
    from pipi.data.prediction_file import join_predictions, read_prediction_file

    frames = _staged_like([
        ("test/Erosion/v1_7.jpg", "v1_7.jpg", "v1", 7, "test"),
        ("test/Pylorus/v1_7.jpg", "v1_7.jpg", "v1", 7, "test"),   # the same image, 2 labels
        ("test/Ulcer/v2_3.jpg", "v2_3.jpg", "v2", 3, "test"),
        ("train/Ulcer/v3_1.jpg", "v3_1.jpg", "v3", 1, "train"),
    ])
    probs = np.eye(14)[[4, 13]]
    path = tmp_path / "p.csv"
    pd.DataFrame(probs, columns=list(CLASSES)).assign(filename=["v1_7.jpg", "v2_3.jpg"]) \
        .to_csv(path, index=False)
    joined = join_predictions(path, *read_prediction_file(path), frames)
    assert joined.splits == ("test",) and joined.key == "filename"
    assert list(joined.split) == ["test", "test", "test", ""]
    np.testing.assert_array_equal(joined.probs[:3], probs[[0, 0, 1]])


def _per_label_csv(out, names, probs, **extra):
    """A prediction file as pipi's own test predictions list frames: one row per (frame,
    label), exported to CSV with a filename column and the class names as columns."""
    df = pd.DataFrame(probs, columns=list(CLASSES)).assign(filename=names, **extra)
    df.to_csv(out, index=False, float_format="%.9f")
    return out


def test_a_multilabel_frame_listed_once_per_label_is_one_frame(tmp_path):
    from pipi.data.prediction_file import join_predictions, read_prediction_file

    frames = _staged_like([
        ("test/Erosion/v1_7.jpg", "v1_7.jpg", "v1", 7, "test"),
        ("test/Pylorus/v1_7.jpg", "v1_7.jpg", "v1", 7, "test"),   # the same image, 2 labels
        ("test/Ulcer/v2_3.jpg", "v2_3.jpg", "v2", 3, "test"),
    ])
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(14), size=2)
    same = p[[0, 0, 1]]
    same[1] += 4e-7 * (np.arange(14) % 2 - 0.5)                   # agrees to 1e-6
    path = _per_label_csv(tmp_path / "rows.csv", ["v1_7.jpg", "v1_7.jpg", "v2_3.jpg"], same,
                          label=[4, 11, 13])
    joined = join_predictions(path, *read_prediction_file(path), frames)
    assert joined.key == "filename" and list(joined.split) == ["test"] * 3
    np.testing.assert_allclose(joined.probs, p[[0, 0, 1]], atol=1e-6)
    # the rows disagree: refused, naming the frame
    other = same.copy()
    other[1] = np.roll(other[1], 1)
    bad = _per_label_csv(tmp_path / "bad.csv", ["v1_7.jpg", "v1_7.jpg", "v2_3.jpg"], other)
    with pytest.raises(DataError, match=r"1 frames are listed more than once with different "
                                        r"probabilities \(e.g. v1_7.jpg; largest difference"):
        join_predictions(bad, *read_prediction_file(bad), frames)
    # where the file gives the staged path, rows join by it: each label row its own values
    by_path = _per_label_csv(tmp_path / "paths.csv", ["v1_7.jpg", "v1_7.jpg", "v2_3.jpg"],
                             other, path=frames["path"].tolist())
    joined = join_predictions(by_path, *read_prediction_file(by_path), frames)
    assert joined.key == "path"
    np.testing.assert_allclose(joined.probs, other, atol=1e-8)


def test_names_shared_by_several_videos_must_be_told_apart(tmp_path):
    from pipi.data.prediction_file import join_predictions, read_prediction_file

    frames = _staged_like([   # a Galar-like layout: the same file name in every video
        ("test/1/frame_000001.png", "frame_000001.png", "1", 1, "test"),
        ("test/2/frame_000001.png", "frame_000001.png", "2", 1, "test"),
    ])
    probs = np.full((2, 14), 1 / 14)
    by_name = tmp_path / "names.csv"
    pd.DataFrame(probs, columns=list(CLASSES)).assign(filename=["frame_000001.png"] * 2) \
        .to_csv(by_name, index=False)
    with pytest.raises(DataError, match="frame names are not unique in the staged release"):
        join_predictions(by_name, *read_prediction_file(by_name), frames)
    one = tmp_path / "one.csv"
    pd.DataFrame(probs[:1], columns=list(CLASSES)).assign(filename=["frame_000001.png"]) \
        .to_csv(one, index=False)
    with pytest.raises(DataError, match="frame names are not unique in the staged release"):
        join_predictions(one, *read_prediction_file(one), frames)
    by_video = tmp_path / "videos.parquet"
    pd.DataFrame(probs, columns=list(CLASSES)).assign(video_id=["2", "1"], frame_number=[1, 1]) \
        .to_parquet(by_video)
    joined = join_predictions(by_video, *read_prediction_file(by_video), frames)
    assert joined.key == "video_id+frame_number" and list(joined.split) == ["test", "test"]
    by_path = tmp_path / "paths.npz"
    np.savez(by_path, filenames=np.array(["test/2/frame_000001.png", "test/1/frame_000001.png"]),
             probs=np.eye(14)[[0, 1]], classes=np.array(list(reversed(CLASSES))))
    joined = join_predictions(by_path, *read_prediction_file(by_path), frames)
    assert joined.key == "path"   # columns in the order 'classes' names: Ulcer first
    np.testing.assert_array_equal(joined.probs, np.eye(14)[[12, 13]])


# --------------------------------------------------------------------------- promote
def test_mark_imported_names_arms_by_source_children_included():
    from pipi.analysis import cell_label, mark_imported
    from pipi.cells import Arm

    def tags(**kw):
        return json.dumps({f"pipi.{k}": v for k, v in kw.items()})

    runs = pd.DataFrame({
        "run_id": list("abcde"),
        "cell": ["a", "a", "pi", "a@perturb_jpeg25", ""],
        "tags": [tags(), tags(source="external"),
                 tags(source="external", source_label="yang2026"),
                 tags(source="external"), tags(source="external")],
    })
    marked = mark_imported(runs)
    assert marked["cell"].tolist() == ["a", "a (released)", "pi (yang2026)",
                                       "a (released)@perturb_jpeg25", ""]
    assert marked["source"].tolist() == ["", "external", "external", "external", "external"]
    assert mark_imported(runs, pair=True)["cell"].tolist() == runs["cell"].tolist()
    trained = runs.iloc[[0]]
    assert mark_imported(trained)["cell"].tolist() == ["a"]          # nothing imported
    assert mark_imported(runs.iloc[:0])["cell"].tolist() == []       # no runs
    assert Arm.parse("pi (yang2026)") == Arm("pi", "yang2026")
    assert Arm.parse("pi") == Arm("pi", "")
    assert cell_label("a (released)") == "(a) RGB-only per-frame baseline [released: imported]"


def test_npz_names_as_bytes_are_read_and_pickles_are_refused(tmp_path):
    from pipi.data.prediction_file import read_prediction_file

    probs = np.full((2, 14), 1 / 14)
    as_bytes = tmp_path / "bytes.npz"
    np.savez(as_bytes, filenames=np.array([b"v1_7.jpg", b"v2_3.jpg"]), probs=probs)
    keys, _ = read_prediction_file(as_bytes)
    assert keys["filename"].tolist() == ["v1_7.jpg", "v2_3.jpg"]
    pickled = tmp_path / "objects.npz"
    np.savez(pickled, filenames=np.array(["v1_7.jpg", "v2_3.jpg"], dtype=object), probs=probs)
    with pytest.raises(DataError, match="object \\(pickled\\) array"):
        read_prediction_file(pickled)


# --------------------------------------------------------------------------- another class set
def _cv_frames():
    """Staged rows of an image dataset in the Capsule Vision layout (`image_path` as the
    challenge's sheet writes it; two SEE-AI files share a name in two class folders)."""
    rows = [("test/Bleeding/SEE-AI/image00001.jpg", "Bleeding", 1,
             "validation\\Bleeding\\SEE-AI\\image00001.jpg"),
            ("test/Worms/SEE-AI/image00001.jpg", "Worms", 2,
             "validation\\Worms\\SEE-AI\\image00001.jpg"),
            ("test/Angioectasia/KID/angioectasia-P0-3.jpg", "Angioectasia", 0,
             "validation\\Angioectasia\\KID\\angioectasia-P0-3.jpg"),
            ("train/Worms/KID/worms-P1-4.jpg", "Worms", 2, "training\\Worms\\KID\\worms-P1-4.jpg")]
    return pd.DataFrame([{"path": p, "filename": p.rsplit("/", 1)[-1], "class": c,
                          "class_index": k, "video_id": f"v{i}", "frame_number": i,
                          "split": p.split("/")[0], "image_path": ip}
                         for i, (p, c, k, ip) in enumerate(rows)])


CV = ("Angioectasia", "Bleeding", "Worms")


@pytest.mark.parametrize("suffix", [".xlsx", ".csv"])
def test_the_challenge_s_prediction_sheet_joins_by_image_path(tmp_path, suffix):
    """The sheet as `save_predictions_to_excel` writes it: image_path (Windows separators),
    one probability column per class, predicted_class."""
    from pipi.classes import ClassSet
    from pipi.data.prediction_file import join_predictions, read_prediction_file

    frames = _cv_frames()
    probs = np.array([[0.1, 0.7, 0.2], [0.2, 0.1, 0.7], [0.6, 0.3, 0.1]])
    sheet = pd.DataFrame({"image_path": frames["image_path"][:3]})
    for k, c in enumerate(CV):
        sheet[c] = probs[:, k]
    sheet["predicted_class"] = [CV[k] for k in probs.argmax(1)]
    path = tmp_path / f"predictions{suffix}"
    sheet.to_excel(path, index=False) if suffix == ".xlsx" else sheet.to_csv(path, index=False)
    classes = ClassSet(CV)
    joined = join_predictions(path, *read_prediction_file(path, classes), frames)
    assert joined.key == "image_path" and joined.splits == ("test",)
    assert list(joined.split) == ["test", "test", "test", ""]
    np.testing.assert_allclose(joined.probs[:3], probs)


def test_a_prediction_file_of_another_class_set_is_refused_in_one_line(tmp_path):
    from pipi.classes import ClassSet
    from pipi.data.prediction_file import read_prediction_file

    classes = ClassSet(CV)
    kvasir = tmp_path / "kvasir.csv"  # Kvasir's 14 columns against a 3-class staged set
    pd.DataFrame(np.full((2, 14), 1 / 14), columns=list(CLASSES)).assign(
        filename=["a.jpg", "b.jpg"]).to_csv(kvasir, index=False)
    with pytest.raises(DataError) as err:
        read_prediction_file(kvasir, classes)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{kvasir}: unknown class columns ['Ampulla of")
    assert "the staged data's 3 classes ['Angioectasia', 'Bleeding', 'Worms']" in msg
    npz = tmp_path / "p.npz"
    np.savez(npz, filenames=np.array(["a.jpg", "b.jpg"]), probs=np.full((2, 14), 1 / 14))
    with pytest.raises(DataError) as err:
        read_prediction_file(npz, classes)
    assert str(err.value) == (
        f"{npz}: 'filenames' (2,) and 'probs' (2, 14) do not fit: expected (N,) and (N, 3); "
        "the staged data has 3 classes (Angioectasia, Bleeding, Worms)")
    # the same NPZ form with the data's 3 classes, in another order named by `classes`
    np.savez(npz, filenames=np.array(["a.jpg", "b.jpg"]),
             probs=np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]),
             classes=np.array(["Worms", "Angioectasia", "Bleeding"]))
    _, probs = read_prediction_file(npz, classes)
    np.testing.assert_allclose(probs, [[0.3, 0.2, 0.5], [0.1, 0.8, 0.1]])


def test_image_path_needs_a_staged_image_dataset(tmp_path):
    from pipi.data.prediction_file import join_predictions, read_prediction_file

    path = tmp_path / "p.csv"
    pd.DataFrame(np.eye(14)[[4]], columns=list(CLASSES)).assign(
        image_path=["test\\Erosion\\v1_7.jpg"]).to_csv(path, index=False)
    frames = _staged_like([("test/Erosion/v1_7.jpg", "v1_7.jpg", "v1", 7, "test")])
    with pytest.raises(DataError, match="names frames by image_path, which only a staged image"):
        join_predictions(path, *read_prediction_file(path), frames)

"""A registered model scores a frame table on Spark (issue 40 item 3): MLflow's
``mlflow.pyfunc.spark_udf`` in a local Spark session (a real JVM), with the registered pyfunc's
probabilities. docs/serving.md shows the cluster form."""

from __future__ import annotations

import base64
import os
import sys

import mlflow
import numpy as np
import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

from pipi.config import make_config
from pipi.runs import training as workflow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.xdist_group("test_spark")]


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable          # the executors' Python: this venv
    session = (SparkSession.builder.master("local[1]").appName("pipi-spark-test")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .getOrCreate())
    yield session
    session.stop()


def test_spark_udf_scores_a_frame_table_as_the_pyfunc(spark, training_store, tiny_staged):
    s = workflow.train(make_config(cell="pi", seed=4, backbone="resnet18", profile="smoke",
                                   weights="none"), experiment="spark", data=str(tiny_staged),
                                   progress=False)
    uri = f"models:/{s.registered_name}@candidate"
    frames = pd.read_parquet(tiny_staged / "frames.parquet")
    paths = frames.loc[frames["split"] == "test", "path"].iloc[:12]
    table = pd.DataFrame({"image": [base64.b64encode((tiny_staged / p).read_bytes()).decode()
                                    for p in paths]})
    py = mlflow.pyfunc.load_model(uri)
    want = py.predict(table)
    # the output columns as docs/serving.md reads them from the model's signature
    names = py.metadata.get_output_schema().input_names()[:-1]
    assert names == list(want.columns[:-1])
    schema = StructType([*(StructField(n, DoubleType()) for n in names),
                         StructField("predicted_class", StringType())])
    udf = mlflow.pyfunc.spark_udf(spark, uri, env_manager="local", result_type=schema)
    got = (spark.createDataFrame(table).withColumn("p", udf("image")).select("p.*")
           .toPandas())
    assert list(got.columns) == [*names, "predicted_class"] and len(got) == len(table)
    probs = want[names].to_numpy()
    assert probs.std(0).max() > 1e-3                    # frames the model tells apart
    np.testing.assert_allclose(got[names].to_numpy(), probs, atol=1e-5)
    assert got["predicted_class"].tolist() == want["predicted_class"].tolist()

"""`distbench predict`: throughput, speedup, efficiency, epoch time and cost at device counts nobody ran,
from a physical step-time model (docs/prediction.md). One job per module:

  links      links, the alpha-beta cost per tier, fitted / named links, traffic of each strategy
  sources    measured points (store or CSV) grouped into series, overlap, per-rank spread
  pipeline   the bucket pipeline: each bucket reduced once ready and the link is free (the exposed communication)
  model      the step-time model: compute + exposed communication + straggler wait + slow-rank wait
  fit        the model from several measured points (the bandwidths the data identify)
  single     the model from one measured device and the links; its calibration
  layers     per-layer parameters and FLOPs of the known models, and the bucket timeline they imply
  profiled   the bucket timeline from a one-device profile's trace
  whatif     --what-if link=...: the same workload onto another network
  validate   held-out checks against the naive guess, scores, what to measure next
  document   the prediction document (rows, parameters, warnings, what-ifs, order checks)
  render     tables, summary lines, plot images
  saved      the store's predictions table

The package's face (`__all__`) is what the predict command, the report and the tests call it by.
"""

from distbench.predict.document import predict
from distbench.predict.fit import build_model
from distbench.predict.links import (
    ALGORITHMS,
    Link,
    allreduce_time,
    buckets_for,
    explicit_links,
    fit_link,
    link_from_allreduce,
    links_from_comm,
    ring_allreduce_time,
    traffic_factor,
    tree_allreduce_time,
)
from distbench.predict.model import MODEL_BIAS_PER_DOUBLING, MODEL_ERROR_PER_DOUBLING, straggler
from distbench.predict.render import PREDICTION_NOTE, plot_images, summary_lines, table_rows, validation_rows
from distbench.predict.saved import latest_for, save
from distbench.predict.sources import Observed, Series, read_csv, series_from_records
from distbench.predict.validate import holdout, next_measurement, score, verdict_lines

__all__ = [
    "ALGORITHMS",
    "MODEL_BIAS_PER_DOUBLING",
    "MODEL_ERROR_PER_DOUBLING",
    "PREDICTION_NOTE",
    "Link",
    "Observed",
    "Series",
    "allreduce_time",
    "buckets_for",
    "build_model",
    "explicit_links",
    "fit_link",
    "holdout",
    "latest_for",
    "link_from_allreduce",
    "links_from_comm",
    "next_measurement",
    "plot_images",
    "predict",
    "read_csv",
    "ring_allreduce_time",
    "save",
    "score",
    "series_from_records",
    "straggler",
    "summary_lines",
    "table_rows",
    "traffic_factor",
    "tree_allreduce_time",
    "validation_rows",
    "verdict_lines",
]

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
"""

from distbench.predict.document import physical_cores, predict, target_counts  # noqa: F401
from distbench.predict.links import (  # noqa: F401
    ALGORITHMS,
    Link,
    allreduce_time,
    buckets_for,
    explicit_links,
    fit_link,
    link_from_allreduce,
    links_from_comm,
    ring_allreduce_time,
    tier_times,
    traffic_factor,
    tree_allreduce_time,
)
from distbench.predict.fit import build_model  # noqa: F401
from distbench.predict.model import (  # noqa: F401
    MODEL_BIAS_PER_DOUBLING,
    MODEL_ERROR_PER_DOUBLING,
    NOMINAL_EFFICIENCY,
    StepTimeModel,
    per_device_batch,
    straggler,
)
from distbench.predict.render import PREDICTION_NOTE, plot_images, summary_lines, table_rows, validation_rows  # noqa: F401
from distbench.predict.saved import latest_for, save  # noqa: F401
from distbench.predict.sources import CSV_OPTIONAL, CSV_REQUIRED, Observed, Series, read_csv, series_from_records  # noqa: F401
from distbench.predict.validate import holdout, next_measurement, score, verdict_lines  # noqa: F401

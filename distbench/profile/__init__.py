"""Why one strategy or framework is faster: a few steady-state steps of a point profiled after its timed
window with the framework's own profiler (torch.profiler, tf.profiler), every operation mapped into one set
of categories for both frameworks, and a Chrome trace-event file per profiled point.

  categories  the categories and the name rules that map torch and TF operations (and GPU kernels) into them
  trace       trace-event JSON: loading and checking it, TF's XSpace converted to it, where traces are kept
  breakdown   a trace's steps attributed to the categories (time per step, share, ops, top ops)
  compare     two breakdowns side by side: the differences per category and sentences drawn from the data
  request     what a sweep asks its points (PointConfig.profiling) and the checks of the flags
  hooks       inside the workers: profile a few steps after the timed window (torch_common, tf_common)
"""

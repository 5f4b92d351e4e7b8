"""Model definitions, one per architecture per framework, with identical structure.

`distbench.models.specs` holds the framework-free facts (names, input shapes, reference parameter
counts); `torch_models` and `keras_models` each hold a plain-dict registry with the same keys. The
model files know nothing about distribution: launchers decide how a model is parallelized.
"""

from distbench.models.specs import MODEL_SPECS, ModelSpec, get_spec, model_names  # noqa: F401

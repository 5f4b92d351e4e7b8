"""Model definitions, one per architecture per framework, with identical structure.

`specs` holds the framework-free facts (names, input shapes, reference parameter counts, the architecture
tables both frameworks build from). `torch_models` and `keras_models` are the import points: each holds
its framework's plain-dict registry (the same keys) and what callers ask of a model by name (build,
parameter count, synthetic batch, loss; FLOPs for torch). The networks are defined once per framework,
per architecture family, the two frameworks' files mirroring each other:

  torch_resnet / keras_resnet            ResNet-18/50/152
  torch_plain / keras_plain              plain feed-forward nets: VGG-16, linear, mlp
  torch_mobilenet / keras_mobilenet      inverted-residual nets: MobileNetV2, EfficientNet-B4
  torch_unet / keras_unet                SLEAP's UNet (confidence maps)
  torch_transformer / keras_transformer  BERT-base
  torch_recurrent / keras_recurrent      the LSTM language model

Importing this package imports neither torch nor TensorFlow; only the framework modules do. The model
files know nothing about distribution: launchers decide how a model is parallelized.
"""

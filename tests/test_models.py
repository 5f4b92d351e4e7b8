"""Model parity: the torch and Keras definitions are the same network, with the reference counts."""
import os

import pytest

from distbench.models.specs import MODEL_SPECS
from tests.conftest import require

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@require("torch", "keras")
def test_registries_have_the_same_names():
    from distbench.models import keras_models, torch_models

    assert set(torch_models.MODELS) == set(keras_models.MODELS) == set(MODEL_SPECS)


@require("torch")
@pytest.mark.parametrize("name", sorted(MODEL_SPECS))
def test_torch_param_count_matches_reference(name):
    from distbench.models import torch_models

    assert torch_models.count_params(torch_models.build_model(name)) == MODEL_SPECS[name].reference_params


@require("keras", "tensorflow")
@pytest.mark.parametrize("name", sorted(MODEL_SPECS))
def test_keras_param_count_matches_reference(name):
    from distbench.models import keras_models

    assert keras_models.count_params(keras_models.build_model(name)) == MODEL_SPECS[name].reference_params


@require("torch")
def test_torch_forward_backward_tiny():
    import torch

    from distbench.models import torch_models

    model = torch_models.build_model("resnet18", num_classes=10)
    x = torch.randn(2, 3, 32, 32)
    out = model(x)
    assert out.shape == (2, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@require("keras", "tensorflow")
def test_keras_forward_backward_tiny():
    import tensorflow as tf

    from distbench.models import keras_models

    model = keras_models.build_model("resnet18", num_classes=10, image_size=32)
    x = tf.random.normal((2, 32, 32, 3))
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        loss = tf.reduce_sum(out)
    assert out.shape == (2, 10)
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)

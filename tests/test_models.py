"""Model parity: the torch and Keras definitions are the same network, with the reference counts.

Each model is built once per framework per module (the module-scoped `name` fixture makes pytest
run every test of one model before building the next, so at most one model per framework is
alive). Keras models are built at tiny inputs: parameter counts do not depend on the input size.
"""

import gc
import json
import os
import sys

import numpy as np
import pytest

from distbench.models.specs import MODEL_SPECS, check_input, get_spec
from tests.conftest import have, require

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

NAMES = sorted(MODEL_SPECS)
FAST_PARAMS = 12_000_000
"""Models up to this many parameters (resnet18 and smaller) are checked in the fast tier; building and
stepping the larger ones takes seconds each, so they are in the slow tier (`make test` runs both)."""
BATCH = 2  # torch BatchNorm needs 2 values per channel at a 1x1 final feature map
# Weight-for-weight comparisons (torch weights copied into Keras, same outputs). The ResNets'
# Keras weight order differs from torch's (the shortcut is built first), so they are left out.
SAME_OUTPUT = ("bert_base", "efficientnet_b4", "lstm", "mobilenet_v2", "unet", "vgg16")


def tiny(name: str) -> dict:
    spec = get_spec(name)
    if spec.kind == "tokens":
        return {"seq_len": 8}
    # EfficientNet at 64: at 32 its 1x1 final maps let random weights wash the input out of the
    # outputs, which the same-outputs test needs to see.
    if name in ("mlp", "cnn"):  # a layer's size follows the input's: the reference count is at the default side
        return {"image_size": spec.default_image_size}
    return {"image_size": 64 if name == "efficientnet_b4" else max(32, spec.min_image_size)}


def expected_output_shape(name: str, framework: str) -> tuple:
    spec, t = get_spec(name), tiny(name)
    if spec.kind == "tokens":
        return (BATCH, t["seq_len"], spec.vocab_size) if spec.loss == "lm_cross_entropy" else (BATCH, spec.num_classes)
    if spec.kind == "keypoints":
        side = t["image_size"] // spec.output_stride
        return (BATCH, spec.num_classes, side, side) if framework == "torch" else (BATCH, side, side, spec.num_classes)
    return (BATCH, spec.num_classes)


@pytest.fixture(
    scope="module",
    params=[
        n if MODEL_SPECS[n].reference_params <= FAST_PARAMS else pytest.param(n, marks=pytest.mark.slow) for n in NAMES
    ],
)
def name(request):
    return request.param


@pytest.fixture(scope="module")
def torch_model(name):
    from distbench.models import torch_models

    model = torch_models.build_model(name)
    yield model
    del model
    gc.collect()


@pytest.fixture(scope="module")
def keras_model(name):
    import keras

    from distbench.models import keras_models

    model = keras_models.build_model(name, **tiny(name))
    yield model
    del model
    keras.backend.clear_session()
    gc.collect()


@require("torch", "keras")
def test_registries_have_the_same_names():
    from distbench.models import keras_models, torch_models

    assert set(torch_models.MODELS) == set(keras_models.MODELS) == set(MODEL_SPECS)


def test_reference_counts_of_the_documented_models():
    assert abs(MODEL_SPECS["unet"].reference_params / 1.29e6 - 1) < 0.02
    assert abs(MODEL_SPECS["bert_base"].reference_params / 110e6 - 1) < 0.02
    # The SLEAP backbone is 1,295,032 (sleap-nn's compute_unet_params for this config) + a 48->13 1x1 head.
    assert MODEL_SPECS["unet"].reference_params == 1_295_032 + 48 * 13 + 13
    # HF bert-base-uncased BertModel is 109,482,240; + a 768->2 classifier.
    assert MODEL_SPECS["bert_base"].reference_params == 109_482_240 + 768 * 2 + 2
    v, e, h = 10000, 650, 650
    assert MODEL_SPECS["lstm"].reference_params == v * e + 2 * (4 * h * (e + h) + 2 * 4 * h) + h * v + v
    # mlp: 8x8x1 inputs -> 128 hidden -> 10 classes, weights and biases.
    assert MODEL_SPECS["mlp"].reference_params == 64 * 128 + 128 + 128 * 10 + 10 == 9610
    # cnn at 20x20: conv 1->32 (3x3), conv 32->64 (3x3), then 64 x 5 x 5 -> 10.
    assert MODEL_SPECS["cnn"].reference_params == (9 * 32 + 32) + (9 * 32 * 64 + 64) + (64 * 25 * 10 + 10) == 34826


@require("torch")
def test_torch_param_count_matches_reference(name, torch_model):
    from distbench.models import torch_models

    assert torch_models.count_params(torch_model) == MODEL_SPECS[name].reference_params


@require("keras", "tensorflow")
def test_keras_param_count_matches_reference(name, keras_model):
    from distbench.models import keras_models

    assert keras_models.count_params(keras_model) == MODEL_SPECS[name].reference_params


@require("torch")
def test_torch_forward_backward_every_parameter_gets_a_gradient(name, torch_model):
    import torch

    from distbench.models import torch_models

    x, y = torch_models.synthetic_batch(name, BATCH, **tiny(name))
    spec = get_spec(name)
    assert x.dtype == (torch.long if spec.kind == "tokens" else torch.float32)
    torch_model.train()
    torch_model.zero_grad(set_to_none=True)
    out = torch_model(x)
    assert tuple(out.shape) == expected_output_shape(name, "torch")
    loss = torch_models.loss_fn(name)(out, y)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    missing = [n for n, p in torch_model.named_parameters() if p.grad is None]
    assert not missing, missing
    torch_model.zero_grad(set_to_none=True)


@require("keras", "tensorflow")
def test_keras_forward_backward_every_weight_gets_a_gradient(name, keras_model):
    import tensorflow as tf

    from distbench.models import keras_models

    x, y = keras_models.synthetic_batch(name, BATCH, **tiny(name))
    with tf.GradientTape() as tape:
        out = keras_model(x, training=True)
        loss = keras_models.loss_fn(name)(out, y)
    assert tuple(out.shape) == expected_output_shape(name, "keras")
    assert loss.shape == () and np.isfinite(float(loss))
    per_example = keras_models.per_example_loss_fn(name)(out, y)
    assert tuple(per_example.shape) == (BATCH,)
    np.testing.assert_allclose(float(tf.reduce_mean(per_example)), float(loss), rtol=1e-5)
    grads = tape.gradient(loss, keras_model.trainable_weights)
    missing = [w.path for w, g in zip(keras_model.trainable_weights, grads) if g is None]
    assert not missing, missing


def _torch_to_keras(param_name: str, p, keras_shape: tuple, name: str) -> np.ndarray:
    a = p.detach().numpy()
    if a.ndim == 4:  # conv (O, I, kh, kw) -> (kh, kw, I, O); depthwise (C, 1, kh, kw) -> (kh, kw, C, 1)
        a = a.transpose(2, 3, 0, 1) if a.shape[1] == 1 and keras_shape[3] == 1 else a.transpose(2, 3, 1, 0)
    elif a.ndim == 2 and "embedding" not in param_name:
        if name == "vgg16" and param_name == "classifier.0.weight":  # flatten order NCHW -> NHWC
            a = a.reshape(4096, 512, 7, 7).transpose(0, 2, 3, 1).reshape(4096, -1)
        a = a.T
    return a.reshape(keras_shape)


@require("torch", "keras", "tensorflow")
def test_same_weights_give_the_same_outputs_and_losses(name, torch_model, keras_model):
    """Layer for layer the same network: torch's weights copied into Keras give the same outputs
    (inference mode) and the same loss."""
    if name not in SAME_OUTPUT:
        pytest.skip("weight order differs between frameworks; covered by the parameter counts")
    import tensorflow as tf
    import torch

    from distbench.models import keras_models, torch_models

    named = list(torch_model.named_parameters())
    assert len(named) == len(keras_model.trainable_weights)
    torch.manual_seed(0)
    with torch.no_grad():  # random values everywhere (norm scales and biases included) that keep the signal
        for pname, p in named:
            if p.ndim > 1:
                p.normal_(0.0, 2**0.5 * (p[0].numel() if "embedding" not in pname else 2) ** -0.5)
            elif pname.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.1)
    for (pname, p), w in zip(named, keras_model.trainable_weights):
        w.assign(_torch_to_keras(pname, p, tuple(w.shape), name))
    # The training-mode tests moved the BatchNorm statistics differently; start both from 0 / 1.
    for m in torch_model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
    for layer in keras_model.layers:
        if hasattr(layer, "moving_mean"):
            layer.moving_mean.assign(np.zeros(layer.moving_mean.shape, "float32"))
            layer.moving_variance.assign(np.ones(layer.moving_variance.shape, "float32"))
    x, y = torch_models.synthetic_batch(name, BATCH, **tiny(name), seed=3)
    torch_model.eval()
    with torch.no_grad():
        out_t = torch_model(x)
        loss_t = float(torch_models.loss_fn(name)(out_t, y))
    to_nhwc = (lambda a: a.transpose(0, 2, 3, 1)) if x.ndim == 4 else (lambda a: a)
    out_k = keras_model(tf.constant(to_nhwc(x.numpy())), training=False)
    y_k = tf.constant(to_nhwc(y.numpy()) if y.ndim == 4 else y.numpy())
    loss_k = float(keras_models.loss_fn(name)(out_k, y_k))
    out_t = out_t.numpy()
    out_t = out_t.transpose(0, 2, 3, 1) if out_t.ndim == 4 else out_t
    assert np.abs(out_t[0] - out_t[1]).max() > 1e-3 * np.abs(out_t).max()  # the input reaches the output
    np.testing.assert_allclose(out_k.numpy(), out_t, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(out_t).max()))
    np.testing.assert_allclose(loss_k, loss_t, rtol=1e-5)
    torch_model.train()


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


@require("torch")
def test_num_classes_only_changes_classifier_heads():
    from distbench.models import torch_models

    assert torch_models.build_model("bert_base", num_classes=5).classifier[1].out_features == 5
    assert torch_models.build_model("unet", num_classes=1000).head.out_channels == 13  # fixed maps
    assert torch_models.build_model("lstm", num_classes=1000).decoder.out_features == 10000  # the vocab
    _, y = torch_models.synthetic_batch("mobilenet_v2", 4, image_size=32, num_classes=7)
    assert int(y.max()) < 7


@require("torch", "tensorflow")
def test_synthetic_targets_are_the_same_kind_in_both_frameworks():
    import torch

    from distbench.models import keras_models, torch_models

    x, y = torch_models.synthetic_batch("unet", 2, image_size=32)
    xk, yk = keras_models.synthetic_batch("unet", 2, image_size=32)
    assert tuple(x.shape) == (2, 1, 32, 32) and tuple(xk.shape) == (2, 32, 32, 1)
    assert tuple(y.shape) == (2, 13, 16, 16) and tuple(yk.shape) == (2, 16, 16, 13)
    for maps in (y.numpy(), yk.numpy()):  # one Gaussian peak per map, values in (0, 1]
        assert maps.max() <= 1.0 and maps.min() >= 0.0 and maps.max() > 0.5
    x, y = torch_models.synthetic_batch("lstm", 3, seq_len=10, seed=1)
    assert x.dtype == torch.long and tuple(x.shape) == tuple(y.shape) == (3, 10)
    assert torch.equal(x[:, 1:], y[:, :-1])  # next-token targets
    xk, yk = keras_models.synthetic_batch("lstm", 3, seq_len=10, seed=1)
    assert xk.dtype.name == "int32" and np.array_equal(xk.numpy()[:, 1:], yk.numpy()[:, :-1])
    xk, yk = keras_models.synthetic_batch("bert_base", 3, seq_len=10)
    assert tuple(xk.shape) == (3, 10) and tuple(yk.shape) == (3,) and int(np.max(yk)) < 2


@pytest.mark.parametrize(
    "name,kwargs,message",
    [
        ("resnet50", {"image_size": 16}, "--image-size 16 is too small for resnet50: the minimum is 32"),
        ("vgg16", {"image_size": 31}, "--image-size 31 is too small for vgg16: the minimum is 32"),
        ("unet", {"image_size": 8}, "--image-size 8 is too small for unet: the minimum is 16"),
        ("unet", {"image_size": 100}, "--image-size 100 is not valid for unet: it must be a multiple of 16"),
        ("bert_base", {"seq_len": 600}, "--seq-len 600 is too large for bert_base: the maximum is 512"),
        ("lstm", {"seq_len": 0}, "--seq-len 0 is too small for lstm: the minimum is 1"),
    ],
)
def test_check_input_rejects_with_the_rule(name, kwargs, message):
    with pytest.raises(ValueError) as err:
        check_input(get_spec(name), **kwargs)
    assert str(err.value) == message
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        check_input(name, **kwargs)  # a name works too


def test_check_input_accepts_valid_and_irrelevant_sizes():
    check_input("resnet50", image_size=32)
    check_input("unet", image_size=160)
    check_input("unet", image_size=16)
    check_input("bert_base", seq_len=512)
    check_input("lstm", image_size=3)  # image sizes do not apply to token models
    check_input("resnet18", seq_len=0)  # nor sequence lengths to image models
    for name in NAMES:
        spec = get_spec(name)
        check_input(spec, image_size=spec.default_image_size, seq_len=spec.default_seq_len)


@require("torch")
def test_build_model_checks_the_input_size():
    from distbench.models import torch_models

    with pytest.raises(ValueError, match="the minimum is 32"):
        torch_models.build_model("resnet18", image_size=16)


@require("torch")
def test_forward_flops_per_sample():
    from distbench.models import torch_models

    # torchvision's documented GFLOPS are multiply-adds; FlopCounterMode counts 2 per multiply-add.
    for name, gmacs in (("resnet50", 4.09), ("vgg16", 15.47), ("mobilenet_v2", 0.30), ("efficientnet_b4", 4.39)):
        assert torch_models.forward_flops_per_sample(name) == pytest.approx(2 * gmacs * 1e9, rel=0.015), name
    # LSTM: 2 layers x 4 gates x (input + recurrent) matmuls per token, then the 650 -> 10000 decoder.
    seq, h, v = 35, 650, 10000
    assert torch_models.forward_flops_per_sample("lstm") == 2 * seq * (2 * 4 * h * (h + h) + h * v)
    # BERT: per layer 4 h^2 + 2 h ffn per token, plus QK^T and AV; the pooler and classifier.
    s, h, f = 128, 768, 3072
    layer = 2 * s * (4 * h * h + 2 * h * f) + 2 * 2 * s * s * h
    assert torch_models.forward_flops_per_sample("bert_base") == 12 * layer + 2 * (h * h + 2 * h)
    # FLOPs scale with the input: unet is fully convolutional.
    assert torch_models.forward_flops_per_sample("unet", image_size=320) == 4 * torch_models.forward_flops_per_sample(
        "unet"
    )


def test_models_command_json_and_table():
    from click.testing import CliRunner

    from distbench.commands.models import models

    result = CliRunner().invoke(models, ["--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == list(MODEL_SPECS)
    by_name = {r["name"]: r for r in rows}
    assert by_name["unet"]["input"] == "1x160x160" and by_name["bert_base"]["input"] == "seq 128 tokens"
    assert all(r["params"] == MODEL_SPECS[r["name"]].reference_params for r in rows)
    if have("torch"):
        assert by_name["resnet50"]["forward_gflops_per_sample"] == pytest.approx(8.18, abs=0.01)
    result = CliRunner().invoke(models, [])
    assert result.exit_code == 0
    shown = " ".join(result.output.split())  # the notes wrap at the terminal's width
    assert "25,557,032" in shown and "verifies the torch and the Keras" in shown


def test_models_command_without_torch_prints_dashes(monkeypatch):
    from click.testing import CliRunner

    from distbench.commands.models import models

    monkeypatch.setitem(sys.modules, "distbench.models.torch_models", None)  # import -> ImportError
    result = CliRunner().invoke(models, [])
    assert result.exit_code == 0, result.output
    line = next(li for li in result.output.splitlines() if li.startswith("resnet50 "))
    assert " - " in line
    rows = json.loads(CliRunner().invoke(models, ["--format", "json"]).output)
    assert all(r["forward_gflops_per_sample"] is None for r in rows)

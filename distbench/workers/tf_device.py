"""The devices a TensorFlow worker runs on: which GPUs it sees (or how many logical CPU devices), its thread
pools and math mode (TF32, cuDNN autotuning, the layout, Keras's mixed-precision policy; verify mode's
deterministic ops), the wait before a clock read, and the runtime the record names.

Import order matters: thread pools and logical devices must be configured before TensorFlow creates its
runtime, so `configure()` runs first; TensorFlow and Keras are imported inside the functions, and this
module sets their environment defaults when it is imported (tf_common imports it)."""

from __future__ import annotations

import os

from distbench.core.config import PointConfig

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def gpu_selection(available: int, count: int, first: int = 0) -> list[int]:
    """Indices of the physical GPUs one process uses: `count` of them from `first` on. Everything
    else is hidden from TensorFlow, so it opens no context on GPUs the point does not own."""
    if count < 1 or first < 0 or first + count > available:
        last = first + count - 1
        raise RuntimeError(
            f"the point needs GPU {first}"
            + (f"..{last}" if count > 1 else "")
            + f" on this node but TensorFlow sees {available} GPU(s)"
        )
    return list(range(first, first + count))


def configure(cfg: PointConfig, *, logical_cpus: int = 1, visible_gpu: int | None = None, gpu_count: int = 1):
    """Thread pools, logical CPU devices (MirroredStrategy on CPU workers) and GPU visibility: on
    GPUs this process sees only `gpu_count` GPUs from `visible_gpu` (default 0) on."""
    import tensorflow as tf

    if cfg.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        # Capped like torch's threads: each replica's share of the cores. One process hosting
        # several logical CPU devices gets all their shares, in both pools (inter-op >= replicas,
        # so the replicas' steps can run concurrently).
        threads = cfg.threads_per_worker * logical_cpus
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        if logical_cpus > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)]
            )
    else:
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            raise RuntimeError("--device cuda was requested but TensorFlow sees no GPU")
        gpus = [gpus[i] for i in gpu_selection(len(gpus), gpu_count, visible_gpu or 0)]
        tf.config.set_visible_devices(gpus, "GPU")
        for g in gpus:
            tf.config.experimental.set_memory_growth(g, True)
        # The math mode torch gets too (torch_device.configure_threads); verify_determinism() turns TF32 off.
        tf.config.experimental.enable_tensor_float_32_execution(cfg.tf32 and not cfg.verify)
    return tf


def math_mode(cfg: PointConfig, tf) -> dict:
    """TF32, cuDNN autotuning and memory layout as they are in this process (after verify_determinism)."""
    import keras

    layout = (
        None if cfg.image_size is None else ("NHWC" if keras.config.image_data_format() == "channels_last" else "NCHW")
    )
    if cfg.device == "cpu":
        return {
            "tf32": None,
            "cudnn_autotune": None,
            "layout": layout,
            "note": "CPU workers: TF32 and cuDNN do not apply",
        }
    autotune = os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1").lower() not in ("0", "false")  # TF's default: on
    return {
        "tf32": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
        "cudnn_autotune": "deterministic algorithms only" if cfg.verify and autotune else autotune,
        "layout": layout,
        "note": "verify: deterministic kernels" if cfg.verify else None,
    }


def gpu_name(tf) -> str | None:
    """The first visible GPU's name as the driver reports it (for the MFU peak table)."""
    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else None


def device_names(cfg: PointConfig, n: int) -> list[str]:
    kind = "GPU" if cfg.device == "cuda" else "CPU"
    return [f"/{kind}:{i}" for i in range(n)]


def set_precision(cfg: PointConfig) -> None:
    import keras

    policy = {"fp32": "float32", "bf16": "mixed_bfloat16", "amp": "mixed_float16"}[cfg.precision]
    keras.mixed_precision.set_global_policy(policy)


def sync(out) -> None:
    """Wait for the value: reading the loss blocks until the graph has produced it."""
    if out is not None:
        out.numpy()


def make_sync(cfg: PointConfig, tf=None):
    """The wait before each clock read. On CPUs a tf.function call returns when all its ops ran.
    On GPUs kernels run asynchronously and the loss is ready before backward, the all-reduce and
    the update finish (and a strategy's reduced loss lives on the CPU), so every device this
    process sees is synchronized: after configure() those are exactly the point's devices."""
    if cfg.device != "cuda":
        return sync
    if tf is None:
        import tensorflow as tf

    def sync_devices(out) -> None:
        sync(out)
        tf.test.experimental.sync_devices()

    return sync_devices


def verify_determinism(tf) -> dict:
    """Verify mode: deterministic kernels and no TF32 (GPUs would otherwise run float32 matmuls and
    convolutions with a 10-bit mantissa), so the CPU-calibrated tolerance applies. Recorded."""
    tf.config.experimental.enable_op_determinism()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return {"op_determinism": True, "tf32": bool(tf.config.experimental.tensor_float_32_execution_enabled())}


def runtime_info() -> dict:
    import keras
    import tensorflow as tf

    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "logical_devices": [d.name for d in tf.config.list_logical_devices()],
    }

"""The categories one step's time is split into, the same for torch and TF, and the name rules that map an
operation (a torch.profiler op or record_function, a TF op 'scope/name:Type', a GPU kernel) into them.

`classify(name)` looks at one name alone; `distbench.profile.breakdown` decides an event's category from the
events around it (an op inside the optimizer's step is the optimizer's; anything inside a collective is
communication)."""

from __future__ import annotations

import re

CATEGORIES = (
    "convolution",
    "matmul",
    "normalisation",
    "elementwise",
    "pooling",
    "loss",
    "optimizer",
    "communication",
    "memcpy",
    "data_input",
    "host_overhead",
    "idle",
)
"""In table order: the operation categories, then what is not an operation (host overhead, idle)."""

LABELS = {
    "convolution": "convolution",
    "matmul": "matmul/GEMM",
    "normalisation": "normalisation",
    "elementwise": "elementwise/activation",
    "pooling": "pooling",
    "loss": "loss",
    "optimizer": "optimizer update",
    "communication": "gradient communication",
    "memcpy": "memory copies",
    "data_input": "data input",
    "host_overhead": "host overhead",
    "idle": "idle",
}

MEANING = {
    "convolution": "convolution forward and both backward passes (input and filter gradients), fused bias included",
    "matmul": "matrix multiplications: linear layers, attention, their gradients (GEMM kernels)",
    "normalisation": "batch, layer and group normalisation, forward and backward, running-statistics updates",
    "elementwise": "activations, additions (residuals), casts, copies within a device, reductions outside the "
    "layers above, gradient accumulation",
    "pooling": "max and average pooling (global average pooling included), forward and backward",
    "loss": "the loss function (softmax cross-entropy) and its gradient",
    "optimizer": "the optimizer's update and its gradient zeroing (torch Optimizer.step/zero_grad, TF's sgd/ ops)",
    "communication": "gradient collectives and the waits for them: gloo/NCCL (torch.distributed), Horovod, "
    "tf.distribute collectives",
    "memcpy": "copies between host and device and between devices (GPUs only)",
    "data_input": "getting the next batch: DataLoader iteration, tf.data iterator ops",
    "host_overhead": "no operation above running, the framework busy: its dispatch, the autograd engine, TF's "
    "executor, variable reads, views (on GPUs: the device idle while the host launches work)",
    "idle": "in the step, with no operation and no framework call running: Python between framework calls, "
    "waits nothing traces (on GPUs: the device idle and the host in no framework call either)",
}

DEVICE_ONLY = ("memcpy",)
"""Categories that exist only on GPUs: on CPU workers they say 'not on a GPU'."""
NOT_ON_GPU = "not on a GPU"

_I = re.IGNORECASE
# Torch ops, record_functions and GPU kernels: the first rule whose pattern is found in the name wins.
_RULES: tuple[tuple[str, re.Pattern], ...] = (
    (
        "communication",
        re.compile(
            r"gloo|nccl|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|horovod|"
            r"Collective(Reduce|Gather|Bcast)|ProcessGroup|DistributedDataParallel\.reducer|"
            r"CrossDeviceOps|alltoall",
            _I,
        ),
    ),
    ("data_input", re.compile(r"DataLoader|IteratorGetNext|Iterator::|MultiDeviceIterator", _I)),
    (
        "optimizer",
        re.compile(r"Optimizer\.(step|zero_grad)|ResourceApply|multi_tensor_apply|(^|/)(sgd|adam|adamw)(_\d+)?/", _I),
    ),
    ("loss", re.compile(r"cross_?entropy|nll_?loss|log_?softmax|mse_?loss|(^|/)loss(_\d+)?/", _I)),
    ("memcpy", re.compile(r"^Memcpy|^Memset|memcpy[HD]2[HD]|\bHtoD\b|\bDtoH\b|\bDtoD\b", _I)),
    (
        "normalisation",
        re.compile(
            r"batch_?norm|layer_?norm|group_?norm|instance_?norm|rms_?norm|norm_?backward|bn_fw|bn_bw|welford", _I
        ),
    ),
    ("pooling", re.compile(r"pool", _I)),
    ("convolution", re.compile(r"conv(?!ert)|xmma_(fprop|dgrad|wgrad)|implicit_gemm|winograd|depthwise", _I)),
    ("matmul", re.compile(r"matmul|gemm|addmm|aten::(mm|bmm|baddbmm|linear)$|MmBackward|einsum|cublas|cutlass", _I)),
    (
        "elementwise",
        re.compile(
            r"relu|gelu|silu|sigmoid|tanh|threshold|softmax|dropout|elementwise|vectorized|reduce_kernel|"
            r"AccumulateGrad|aten::(add|sub|mul|div|addcmul|addcdiv|neg|exp|log|sqrt|rsqrt|pow|clamp|where|fill|"
            r"zero|zeros|ones|copy|_to_copy|to|clone|contiguous|sum|mean|cat|ne|eq|lt|gt|abs|sign|lerp|"
            r"maximum|minimum|embedding)_?$|(Add|Sub|Mul|Div|Mean|Sum|Pow|Exp|Neg)Backward",
            _I,
        ),
    ),
)

_TF_OP = re.compile(r"^(?P<path>[^:\s]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
"""A TF op as its trace names it: 'gradient_tape/model/conv2d/Conv2DBackpropInput:_MklNativeConv2DBackpropInput'."""
_TF_TYPES: tuple[tuple[str, re.Pattern], ...] = (
    ("communication", re.compile(r"Collective|Nccl|Horovod|AllReduce", _I)),
    ("data_input", re.compile(r"Iterator", _I)),
    ("optimizer", re.compile(r"ResourceApply", _I)),
    ("loss", re.compile(r"CrossEntropy", _I)),
    ("memcpy", re.compile(r"^(_?Memcpy|_HostSend|_HostRecv)", _I)),
    ("normalisation", re.compile(r"BatchNorm|LayerNorm", _I)),
    ("pooling", re.compile(r"Pool", _I)),
    ("convolution", re.compile(r"Conv", _I)),
    ("matmul", re.compile(r"MatMul|Einsum", _I)),
)
_TF_SCOPES: tuple[tuple[str, re.Pattern], ...] = (
    ("communication", _RULES[0][1]),
    ("optimizer", re.compile(r"(^|/)(sgd|adam|adamw|SGD|Adam|optimizer|LossScaleOptimizer)(_\d+)?/")),
    ("loss", re.compile(r"crossentropy|cross_entropy|(^|/)loss(_\d+)?/|compute_average_loss", _I)),
)
_TF_LAYERS: tuple[tuple[str, re.Pattern], ...] = (
    ("normalisation", re.compile(r"batch_?norm|layer_?norm|group_?norm|_bn(_\d+)?/|(^|/)bn\d*(_\d+)?/|moments/", _I)),
    ("pooling", re.compile(r"pool[^/]*/[^/]+$", _I)),
)
_TF_VARIABLE_OPS = re.compile(
    r"^(ReadVariableOp|AssignVariableOp|AssignAddVariableOp|AssignSubVariableOp|Identity|NoOp)$"
)


def classify(name: str) -> str | None:
    """The category of one operation from its name alone; None: not an operation of any category
    (framework bookkeeping, a step marker, a view)."""
    tf_op = _TF_OP.match(name)
    if tf_op:
        return _classify_tf(tf_op["path"], tf_op["type"])
    for category, pattern in _RULES:
        if pattern.search(name):
            return category
    return None


def _classify_tf(path: str, op_type: str) -> str | None:
    """A TF op: what its scope says first (the optimizer's, the loss's), then its type (Conv2D...), then, for
    generic arithmetic, the layer it is in (a Keras batch normalisation is Mul/Sub/Mean in a '_bn' scope).
    A Keras block name ('conv5_block3_2_relu') says nothing: the type decides there."""
    for category, pattern in _TF_SCOPES:
        if pattern.search(path):
            return category
    for category, pattern in _TF_TYPES:
        if pattern.search(op_type):
            return category
    for category, pattern in _TF_LAYERS:
        if pattern.search(path):
            return category
    if _TF_VARIABLE_OPS.match(op_type):
        return None  # reading a variable: bookkeeping (host overhead) unless its scope said otherwise
    return "elementwise"


def label(category: str) -> str:
    return LABELS.get(category, category)


def parse_filter(text: str | None, flag: str = "--category") -> tuple[str, ...] | None:
    """'conv,matmul' -> the categories named (a category's key or label; unique prefixes accepted); None: all.
    ValueError naming `flag` and the known names for an unknown one."""
    if text is None or not text.strip():
        return None
    chosen: list[str] = []
    for raw in (part.strip().lower() for part in text.split(",")):
        if not raw:
            raise ValueError(f"{flag} {text!r} has an empty entry: give a comma list such as convolution,matmul")
        exact = [c for c in CATEGORIES if raw in (c, LABELS[c].lower())]
        found = exact or [c for c in CATEGORIES if c.startswith(raw) or LABELS[c].lower().startswith(raw)]
        if len(found) != 1:
            why = "is ambiguous" if found else "is not a category"
            raise ValueError(f"{flag}: {raw!r} {why}; categories: {', '.join(CATEGORIES)}")
        if found[0] not in chosen:
            chosen.append(found[0])
    return tuple(chosen)

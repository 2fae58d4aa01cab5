"""Neural-network models as a data-parallel training step sees them: parameter tensors and per-layer compute.

A :class:`ModelSpec` is (a) the parameter tensors in registration order (``torch.nn.Module.named_parameters()``
order, the order DDP's Reducer buckets them in) and (b) the layers in forward execution order, each with the
parameters whose gradients are ready when its backward ends, its FLOPs and its activation traffic per sample.

YAML schema (``collsim/training/models/*.yaml``, or any file given to :func:`load_model`)
------------------------------------------------------------------------------------------
Top level: ``name`` (str), ``source`` (str: where the architecture and numbers come from), ``dtype`` (parameter
dtype, a key of :data:`DTYPE_BYTES`, default ``float32``), ``act_dtype`` (dtype activation bytes are counted in,
default ``dtype``), ``batch_size`` (optional: the samples a rank ran per iteration when its layers' times were
measured; a step at another batch is refused rather than given those times), then exactly one of the two forms
below. Any field ``X`` may be accompanied by ``X_source``
(a string saying where that number comes from); unknown fields are errors.

1. ``architecture:`` a mapping that a builder expands deterministically.

   ``kind: transformer`` with ``style``: ``gpt2`` (HF ``GPT2LMHeadModel``: learned positions, LayerNorm with bias,
   biased linears, GELU FFN, fused QKV ``c_attn``), ``llama`` (HF ``LlamaForCausalLM``: RMSNorm, no biases, rotary
   positions without parameters, SwiGLU FFN of three matrices) or ``bert`` (HF ``BertForPreTraining`` with
   ``head: pretraining``: pooler, MLM head with decoder tied to the word embeddings, NSP head; ``head: pooler`` is
   ``BertModel``, ``head: none`` is ``BertModel(add_pooling_layer=False)``). Fields: ``hidden``, ``layers``,
   ``heads``, ``ffn`` (intermediate size), ``vocab``, ``seq_len`` (tokens per sample), ``max_positions`` (gpt2,
   bert; optional for llama), ``kv_heads`` (llama, default ``heads``), ``type_vocab`` (bert, default 2),
   ``tied_embeddings`` (gpt2 default true, llama default false, bert always true), ``attention`` (``fused``:
   SDPA/FlashAttention, the s x s scores never reach HBM, default; ``eager``: scores and probabilities written and
   read, 4 x heads x s^2 elements). ``norm``, ``bias``, ``ffn_kind`` may be stated but are fixed by the style
   (gpt2: layernorm, true, gelu; llama: rmsnorm, false, swiglu; bert: layernorm, true, gelu).

   ``kind: resnet`` (torchvision ``ResNet``, v1.5: stride on the 3x3 convolution): ``block`` (basic|bottleneck),
   ``layers`` (4 block counts), ``width`` (``width_per_group``, default 64), ``groups`` (default 1),
   ``num_classes`` (default 1000), ``image`` (side in pixels, default 224), ``in_channels`` (default 3).
   Convolutions have no bias; BatchNorm has weight and bias (running statistics are buffers); ``fc`` has a bias.

2. ``params: [{name, numel, dtype?}]`` and ``layers: [{name, params: [names], fwd_flops, bwd_flops?, act_bytes?,
   fwd_time_s?, bwd_time_s?, saves?}]`` for user models and measured profiles (``bwd_flops`` defaults to 2 x
   ``fwd_flops`` for a layer with parameters and 1 x otherwise; ``act_bytes`` to 0; times are for the whole batch,
   seconds; ``saves``: ``inputs``, ``outputs`` (default) or ``nothing``, what the layer's backward keeps from its
   forward, :attr:`Layer.saves`).

Conventions of the built-in builders
------------------------------------
* FLOPs per sample, 2 per multiply-add, matmuls and convolutions only: a linear of ``din -> dout`` over ``t`` tokens
  is ``2 t din dout``; attention scores ``Q K^T`` and ``P V`` are ``2 s^2 h`` each (full s x s, no causal saving);
  a convolution is ``2 k^2 (Cin / groups) Cout Hout Wout``. Embeddings, norms, activations, softmax, residual adds
  and the loss are 0 FLOPs. Summed, a GPT-2 layer is ``24 s h^2 (1 + s / (6h))`` and the LM head ``2 s h V``:
  Narayanan et al. 2021 (SC'21, arXiv:2104.04473) eq. 3, whose ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``
  includes recomputation; without it, forward x 3 = ``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``.
* Backward = 2 x forward FLOPs (gradients wrt input and wrt weights; attention's two matmuls also need two each),
  except the first convolution of a ResNet (no gradient wrt the image: 1 x). FlashAttention's backward recomputes
  ``Q K^T`` (+0.5 x that layer's forward), not counted.
* Activation bytes are an estimate: the elements each operation reads and writes (inputs + outputs) times the
  bytes of ``act_dtype``; weights are not included (:meth:`ModelSpec.layer_param_bytes`). Consumers assume the
  backward moves 2 x the forward's activation bytes. Dropout is not modelled. A tied LM head / MLM decoder owns no
  parameter (the embedding layer does: its gradient is complete only after the embedding's backward, the last),
  so its weight reads are not in ``layer_param_bytes``. BERT's MLM decoder runs at all ``seq_len`` positions, as
  HF's ``BertForPreTraining`` does (Google's original code gathers the masked positions first).
* Layer names: a module's ``named_modules()`` name, or ``module:op`` for an operation inside that module's
  forward (``transformer.h.0:add1``, ``layer1.0.relu:2`` for the second call of that ReLU), ``loss``.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from collsim.files import FileReadError, read_text_file
from collsim.topology.errors import display_path

if TYPE_CHECKING:
    import torch

__all__ = [
    "DTYPE_BYTES",
    "Layer",
    "ModelError",
    "ModelSpec",
    "Param",
    "block_pattern_hint",
    "builtin_models",
    "layer_blocks",
    "load_model",
    "model_from_module",
]

#: What a layer's backward keeps from its forward (:attr:`Layer.saves`).
SAVES = ("inputs", "outputs", "nothing")

#: Bytes per element of the storage dtypes a parameter or activation can have (TF32 is a compute mode, not one).
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}

MODELS_DIR = Path(__file__).resolve().parent / "models"


_BLOCK = re.compile(r"^(.*?)\.(\d+)(?:[.:]|$)")


def _auto_prefix(names: Sequence[str]) -> str | None:
    """The most common ``prefix`` of ``prefix.N...`` layer names (``transformer.h``, ``model.layers``), or None."""
    counts: Counter[str] = Counter()
    for name in names:
        m = _BLOCK.match(name)
        if m:
            counts[m.group(1)] += 1
    if not counts:
        return None
    best = max(counts.items(), key=lambda kv: (len({n for n in names if n.startswith(kv[0] + ".")}), kv[1]))
    return best[0]


def block_pattern_hint(names: Sequence[str]) -> str:
    """What to write for a layer-name pattern that matched nothing: the model's ``prefix.*`` blocks, or, where its
    layers have none, how a pattern matches (from the start of a name; ``*`` a block index) and its first layers.

    >>> block_pattern_hint(["transformer.wte", "transformer.h.0.attn", "transformer.h.1.attn"])
    "its blocks: 'transformer.h.*' (transformer.h.0, transformer.h.1)"
    >>> block_pattern_hint(["a", "b"]).split("; ")[0]
    "its layers have no 'prefix.N' blocks"
    """
    auto = _auto_prefix(names)
    if auto is not None:
        blocks = list(dict.fromkeys(b for b in layer_blocks(names, f"{auto}.*") if b))
        more = ", ..." if len(blocks) > 2 else ""
        return f"its blocks: {auto + '.*'!r} ({', '.join(blocks[:2])}{more})"
    more = ", ..." if len(names) > 4 else ""
    return ("its layers have no 'prefix.N' blocks; a pattern matches from the start of a layer's name, its '*' a block "
            f"index ('fc*': fc1, fc2, ...); its layers: {', '.join(names[:4])}{more}")


def layer_blocks(names: Sequence[str], pattern: str | None = None) -> list[str]:
    """The block each layer belongs to, as a module-wrapping policy matches blocks by name.

    Parameters
    ----------
    names : sequence of str
        The layers' names, forward order.
    pattern : str, optional
        A layer-name pattern whose ``*`` stands for a block index: with ``prefix.*`` every layer named ``prefix.N``
        or ``prefix.N.<...>`` (or ``prefix.N:op``) belongs to block ``prefix.N`` (as ``transformer_auto_wrap_policy``
        or an ``isinstance(module, Block)`` check picks each block); with ``fc*`` every layer ``fcN`` is a block
        of its own. A pattern without ``*`` is a prefix (``prefix`` means ``prefix.*``). Default: the most common
        ``prefix.N`` prefix of the names.

    Returns
    -------
    list of str
        Per layer, its block's name, ``""`` for a layer in none.

    Examples
    --------
    >>> layer_blocks(["emb", "h.0.attn", "h.0:add", "h.1.attn", "head"])
    ['', 'h.0', 'h.0', 'h.1', '']
    >>> layer_blocks(["fc1", "relu1", "fc2"], "fc*")
    ['fc1', '', 'fc2']
    """
    if pattern is None:
        auto = _auto_prefix(names)
        pattern = f"{auto}.*" if auto else None
    elif "*" not in pattern:
        pattern = f"{pattern}.*"  # a bare prefix
    if not pattern:
        return ["" for _ in names]
    # every ``*`` stands for a block index; a layer belongs to the block its name starts with
    block = re.compile(re.escape(pattern).replace(r"\*", r"\d+") + r"(?=[.:]|$)")
    out = []
    for name in names:
        m = block.match(name)
        out.append(m.group(0) if m else "")
    return out


class ModelError(ValueError):
    """A model description that cannot be used; ``str(err) == f"{file}: {field}: {message}"`` (unknown parts left out).

    Parameters
    ----------
    message : str
        What is wrong and what was expected.
    file : str or Path, optional
        The YAML file holding the bad value.
    field : str, optional
        Dotted path of the bad value (``architecture.layers``, ``params.3.dtype``).
    """

    def __init__(self, message: str, file: str | Path | None = None, field: str | None = None) -> None:
        self.file: str | None = display_path(file)
        self.field: str | None = field
        self.message: str = message
        super().__init__(str(self))

    def __str__(self) -> str:
        return ": ".join([p for p in (self.file, self.field) if p] + [self.message])

    def __reduce__(self) -> tuple[type[ModelError], tuple[str, str | None, str | None]]:
        return (ModelError, (self.message, self.file, self.field))


@dataclass(frozen=True)
class Param:
    """One parameter tensor.

    Attributes
    ----------
    name : str
        ``named_parameters()`` name, e.g. ``layer1.0.conv1.weight``.
    numel : int
        Number of elements.
    dtype : str
        Storage dtype, a key of :data:`DTYPE_BYTES`.
    """

    name: str
    numel: int
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        """Size of the tensor (and of its gradient), bytes."""
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Layer:
    """One layer (kernel or group of kernels) of the forward pass; backward runs the layers in reverse.

    Attributes
    ----------
    name : str
        Unique name (see the module docstring for the convention).
    params : tuple of int
        Indices into :attr:`ModelSpec.params` whose gradients are complete when this layer's backward ends.
    fwd_flops, bwd_flops : float
        Forward and backward FLOPs per sample (1 multiply-add = 2 FLOPs).
    act_bytes : float
        HBM bytes per sample the forward reads and writes for activations (an estimate; backward: 2 x this).
    fwd_time_s, bwd_time_s : float or None
        Measured seconds for the whole batch; when set they override the FLOP model.
    saves : str
        What its backward keeps from the forward (autograd's saved tensors): ``inputs`` (only its inputs and
        parameters: a linear, a convolution, GELU or SiLU, an embedding, a product), ``outputs`` (something it
        computes: ReLU's result, a norm's statistics, attention's output and log-sum-exp, pooling indices, the
        loss's softmax; the default), ``nothing`` (a residual add). Activation checkpointing's early stop follows
        it (:func:`collsim.training.step.checkpoint_regions`).
    """

    name: str
    params: tuple[int, ...]
    fwd_flops: float
    bwd_flops: float
    act_bytes: float
    fwd_time_s: float | None = None
    bwd_time_s: float | None = None
    saves: str = "outputs"

    def __post_init__(self) -> None:
        if self.saves not in SAVES:
            raise ModelError(f"saves: expected one of {', '.join(SAVES)}, got {self.saves!r}", field=self.name)


@dataclass(frozen=True)
class ModelSpec:
    """A model: parameters in registration order, layers in forward order (checked on construction).

    Attributes
    ----------
    name : str
    params : tuple of Param
        ``named_parameters()`` order.
    layers : tuple of Layer
        Forward execution order; every parameter index is in exactly one layer.
    source : str
        Where the architecture and the numbers come from.
    act_dtype : str
        Dtype the layers' ``act_bytes`` are counted in.
    measured_batch : int or None
        The batch the layers' measured times (``fwd_time_s``, ``bwd_time_s``) are for, where the file says.

    Raises
    ------
    ModelError
        With the field (``params.3.dtype``, ``layers.7.params``) of the first inconsistency.
    """

    name: str
    params: tuple[Param, ...]
    layers: tuple[Layer, ...]
    source: str
    act_dtype: str = "float32"
    measured_batch: int | None = None

    @property
    def measured(self) -> bool:
        """Whether any layer has measured times (which a step takes as they are, whatever its FLOPs)."""
        return any(ly.fwd_time_s is not None or ly.bwd_time_s is not None for ly in self.layers)

    def __post_init__(self) -> None:
        if self.act_dtype not in DTYPE_BYTES:
            raise ModelError(f"unknown dtype {self.act_dtype!r}; expected one of {sorted(DTYPE_BYTES)}", None,
                             "act_dtype")
        names: set[str] = set()
        for i, p in enumerate(self.params):
            if p.name in names:
                raise ModelError(f"parameter {p.name!r} listed twice", None, f"params.{i}.name")
            names.add(p.name)
            if isinstance(p.numel, bool) or not isinstance(p.numel, int) or p.numel <= 0:
                raise ModelError(f"expected a positive integer, got {p.numel!r}", None, f"params.{i}.numel")
            if p.dtype not in DTYPE_BYTES:
                raise ModelError(f"unknown dtype {p.dtype!r}; expected one of {sorted(DTYPE_BYTES)}", None,
                                 f"params.{i}.dtype")
        if not self.layers:
            raise ModelError("a model needs at least one layer", None, "layers")
        owner: dict[int, str] = {}
        layer_names: set[str] = set()
        for j, layer in enumerate(self.layers):
            if layer.name in layer_names:
                raise ModelError(f"layer {layer.name!r} listed twice", None, f"layers.{j}.name")
            layer_names.add(layer.name)
            for k in layer.params:
                if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(self.params):
                    raise ModelError(f"parameter index {k!r} out of range", None, f"layers.{j}.params")
                if k in owner:
                    raise ModelError(f"parameter {self.params[k].name!r} is already in layer {owner[k]!r}; "
                                     "each parameter belongs to exactly one layer", None, f"layers.{j}.params")
                owner[k] = layer.name
            for key in ("fwd_flops", "bwd_flops", "act_bytes", "fwd_time_s", "bwd_time_s"):
                value = getattr(layer, key)
                if value is None and key.endswith("time_s"):
                    continue
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                    raise ModelError(f"expected a finite number >= 0, got {value!r}", None, f"layers.{j}.{key}")
        missing = [p.name for i, p in enumerate(self.params) if i not in owner]
        if missing:
            raise ModelError(f"parameters in no layer: {', '.join(missing[:5])}", None, "layers")

    def layer_param_bytes(self, i: int) -> int:
        """Bytes of the parameters layer ``i`` owns (its weight reads), bytes."""
        return sum(self.params[k].nbytes for k in self.layers[i].params)

    @property
    def n_params(self) -> int:
        """Number of parameter elements."""
        return sum(p.numel for p in self.params)

    @property
    def param_bytes(self) -> int:
        """Bytes of all parameters (= of all gradients), bytes."""
        return sum(p.nbytes for p in self.params)

    def fwd_flops(self) -> float:
        """Forward FLOPs per sample, summed over the layers."""
        return sum(layer.fwd_flops for layer in self.layers)

    def with_dtype(self, dtype: str | None, act_dtype: str | None = None) -> ModelSpec:
        """The same model with every parameter in ``dtype`` (e.g. ``model.half()``).

        Parameters
        ----------
        dtype : str or None
            New parameter (and gradient) dtype; None keeps each parameter's own.
        act_dtype : str, optional
            New activation dtype, ``act_bytes`` rescaled to it; default ``dtype`` (None: the model's). Autocast with
            fp32 master weights: ``with_dtype("float32", act_dtype="bfloat16")``. Measured times are kept as they
            are.

        Returns
        -------
        ModelSpec

        Examples
        --------
        >>> layer = Layer("fc", (0, 1), fwd_flops=2e4, bwd_flops=4e4, act_bytes=0.0)
        >>> m = ModelSpec("m", (Param("w", 1000, "bfloat16"), Param("b", 10)), (layer,), "example")
        >>> m.with_dtype(None).param_bytes, m.with_dtype("float32").param_bytes
        (2040, 4040)
        """
        act = (self.act_dtype if dtype is None else dtype) if act_dtype is None else act_dtype
        for key, value in (("dtype", dtype), ("act_dtype", act)):
            if value is not None and value not in DTYPE_BYTES:
                raise ModelError(f"unknown dtype {value!r}; expected one of {sorted(DTYPE_BYTES)}", None, key)
        scale = DTYPE_BYTES[act] / DTYPE_BYTES[self.act_dtype]
        params = self.params if dtype is None else tuple(replace(p, dtype=dtype) for p in self.params)
        return replace(self, params=params, act_dtype=act,
                       layers=tuple(replace(layer, act_bytes=layer.act_bytes * scale) for layer in self.layers))


# ----------------------------------------------------------------------------------------------------------------
# Reading fields

_REQUIRED: Any = object()


_YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


def _pos_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("expected a positive integer")
    return v


def _number(v: Any) -> float:
    if isinstance(v, str) and _YAML12_FLOAT.fullmatch(v.strip()):
        v = float(v)  # YAML 1.2 reads 2.0e6 as a number; PyYAML (YAML 1.1) leaves it a string without the sign
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf:
        raise ValueError("expected a finite number >= 0")
    return float(v)


def _string(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("expected a non-empty string")
    return v


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


def _choice(*options: str) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if v not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return str(v)

    return check


_dtype = _choice(*DTYPE_BYTES)


class _Fields:
    """A YAML mapping: unknown fields rejected on construction; errors name the file and the dotted field."""

    def __init__(self, data: Any, file: Path, where: str, allowed: set[str]) -> None:
        self.file, self.where = file, where
        if not isinstance(data, dict):
            raise ModelError(f"expected a mapping, got {type(data).__name__}", file, where or None)
        for key, value in data.items():
            base = key[: -len("_source")] if isinstance(key, str) and key.endswith("_source") else None
            if base is not None and base in allowed and isinstance(value, str):
                continue
            if key not in allowed:
                raise ModelError(f"unknown field; expected one of {', '.join(sorted(allowed))} "
                                 "(or X_source: a string)", file, self.at(str(key)))
        self.data: dict[str, Any] = data

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, message: str) -> ModelError:
        return ModelError(message, self.file, self.at(key))

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, check: Callable[[Any], Any], default: Any = _REQUIRED) -> Any:
        if key not in self.data:
            if default is _REQUIRED:
                raise self.fail(key, "missing field")
            return default
        try:
            return check(self.data[key])
        except ValueError as exc:
            raise self.fail(key, f"{exc}, got {self.data[key]!r}") from None


# ----------------------------------------------------------------------------------------------------------------
# Builders

_Params = list[tuple[str, int]]
# name, parameter names, fwd FLOPs, bwd FLOPs, activation bytes, fwd seconds, bwd seconds, what it saves
_RawLayer = tuple[str, list[str], float, float, float, float | None, float | None, str]


class _Net:
    """Layers appended in forward order; parameters registered separately (registration order differs)."""

    def __init__(self, elem_bytes: int) -> None:
        self.b = elem_bytes
        self.params: _Params = []
        self.layers: list[_RawLayer] = []

    def register(self, params: _Params) -> None:
        self.params += params

    def op(self, name: str, params: _Params, fwd: float, act_elems: float, bwd: float | None = None,
           saves: str = "outputs") -> _Params:
        """A layer; ``saves``: what autograd keeps for its backward (:attr:`Layer.saves`)."""
        bwd = 2 * fwd if bwd is None else bwd
        self.layers.append((name, [n for n, _ in params], fwd, bwd, act_elems * self.b, None, None, saves))
        return params

    def add(self, name: str, act_elems: float) -> None:
        """A residual (or embedding) sum: its backward passes the gradient through, it saves nothing."""
        self.op(name, [], 0, act_elems, saves="nothing")

    def lin(self, name: str, din: int, dout: int, tokens: int, bias: bool, weight: bool = True) -> _Params:
        """A linear layer (``addmm``/``mm`` save the input and the weight)."""
        params = ([(f"{name}.weight", din * dout)] if weight else []) + ([(f"{name}.bias", dout)] if bias else [])
        return self.op(name, params, 2.0 * tokens * din * dout, tokens * (din + dout), saves="inputs")

    def norm(self, name: str, h: int, tokens: int, bias: bool) -> _Params:
        """A LayerNorm, RMSNorm or BatchNorm (they save the statistics they compute)."""
        return self.op(name, [(f"{name}.weight", h)] + ([(f"{name}.bias", h)] if bias else []), 0, 2 * tokens * h)

    def embedding(self, name: str, rows: int, h: int, tokens: int) -> _Params:
        """An embedding lookup (it saves the indices, an input)."""
        return self.op(name, [(f"{name}.weight", rows * h)], 0, 2 * tokens * h, saves="inputs")


_STYLES = {
    "gpt2": {"norm": "layernorm", "bias": True, "ffn_kind": "gelu"},
    "llama": {"norm": "rmsnorm", "bias": False, "ffn_kind": "swiglu"},
    "bert": {"norm": "layernorm", "bias": True, "ffn_kind": "gelu"},
}
_STYLE_FIELDS = {"norm": _choice("layernorm", "rmsnorm"), "bias": _boolean, "ffn_kind": _choice("gelu", "swiglu")}
_TRANSFORMER_FIELDS = {"kind", "style", "hidden", "layers", "heads", "ffn", "vocab", "seq_len", "max_positions",
                       "kv_heads", "type_vocab", "head", "tied_embeddings", "attention", "norm", "bias", "ffn_kind"}
_RESNET_FIELDS = {"kind", "block", "layers", "width", "groups", "num_classes", "image", "in_channels"}


def _transformer(a: _Fields, net: _Net) -> None:
    style = a.get("style", _choice(*_STYLES))
    h, n_layers, heads, f, vocab, s = (a.get(k, _pos_int) for k in
                                       ("hidden", "layers", "heads", "ffn", "vocab", "seq_len"))
    kv = a.get("kv_heads", _pos_int, heads)
    max_pos = a.get("max_positions", _pos_int, None if style == "llama" else _REQUIRED)
    tied = a.get("tied_embeddings", _boolean, style != "llama")
    eager = a.get("attention", _choice("fused", "eager"), "fused") == "eager"
    for key, fixed in _STYLES[style].items():
        if a.get(key, _STYLE_FIELDS[key], fixed) != fixed:
            raise a.fail(key, f"style {style} has {key} {fixed!r}; for other combinations use the params/layers form")
    for key, styles in (("kv_heads", ("llama",)), ("type_vocab", ("bert",)), ("head", ("bert",))):
        if a.has(key) and style not in styles:
            raise a.fail(key, f"not used by style {style}")
    if style == "bert" and not tied:
        raise a.fail("tied_embeddings", "BERT's MLM decoder is always tied to the word embeddings")
    if h % heads or heads % kv:
        raise a.fail("heads", f"hidden ({h}) must be a multiple of heads ({heads}), heads of kv_heads ({kv})")
    if max_pos is not None and s > max_pos:
        raise a.fail("seq_len", f"{s} tokens exceed max_positions ({max_pos})")
    hkv = kv * (h // heads)  # width of K and of V
    attn_fwd, attn_act = 4.0 * s * s * h, s * (2 * h + 2 * hkv) + (4 * heads * s * s if eager else 0)
    regs: _Params = []
    if style == "gpt2":
        regs += net.embedding("transformer.wte", vocab, h, s) + net.embedding("transformer.wpe", max_pos, h, s)
        net.add("transformer:add", 3 * s * h)
        for i in range(n_layers):
            p = f"transformer.h.{i}."
            regs += net.norm(p + "ln_1", h, s, True) + net.lin(p + "attn.c_attn", h, 3 * h, s, True)
            net.op(p + "attn:attention", [], attn_fwd, attn_act)
            regs += net.lin(p + "attn.c_proj", h, h, s, True)
            net.add(p[:-1] + ":add1", 3 * s * h)
            regs += net.norm(p + "ln_2", h, s, True) + net.lin(p + "mlp.c_fc", h, f, s, True)
            net.op(p + "mlp.act", [], 0, 2 * s * f, saves="inputs")  # GELU's backward reads its input
            regs += net.lin(p + "mlp.c_proj", f, h, s, True)
            net.add(p[:-1] + ":add2", 3 * s * h)
        regs += net.norm("transformer.ln_f", h, s, True)
        regs += net.lin("lm_head", h, vocab, s, False, weight=not tied)
    elif style == "llama":
        regs += net.embedding("model.embed_tokens", vocab, h, s)
        for i in range(n_layers):
            p = f"model.layers.{i}."
            ln1 = net.norm(p + "input_layernorm", h, s, False)
            qkv = net.lin(p + "self_attn.q_proj", h, h, s, False) + net.lin(p + "self_attn.k_proj", h, hkv, s, False)
            qkv += net.lin(p + "self_attn.v_proj", h, hkv, s, False)
            net.op(p + "self_attn:rotary", [], 0, 2 * s * (h + hkv), saves="inputs")  # products with cos, sin
            net.op(p + "self_attn:attention", [], attn_fwd, attn_act)
            o = net.lin(p + "self_attn.o_proj", h, h, s, False)
            net.add(p[:-1] + ":add1", 3 * s * h)
            ln2 = net.norm(p + "post_attention_layernorm", h, s, False)
            mlp = net.lin(p + "mlp.gate_proj", h, f, s, False) + net.lin(p + "mlp.up_proj", h, f, s, False)
            net.op(p + "mlp.act_fn", [], 0, 3 * s * f, saves="inputs")  # silu(gate) * up: both save their inputs
            mlp += net.lin(p + "mlp.down_proj", f, h, s, False)
            net.add(p[:-1] + ":add2", 3 * s * h)
            regs += qkv + o + mlp + ln1 + ln2  # LlamaDecoderLayer registers self_attn, mlp, then the two norms
        regs += net.norm("model.norm", h, s, False)
        regs += net.lin("lm_head", h, vocab, s, False, weight=not tied)
    else:
        head = a.get("head", _choice("none", "pooler", "pretraining"), "pretraining")
        type_vocab = a.get("type_vocab", _pos_int, 2)
        e = ("bert." if head == "pretraining" else "") + "embeddings."
        word = net.embedding(e + "word_embeddings", vocab, h, s)
        types = net.embedding(e + "token_type_embeddings", type_vocab, h, s)
        pos = net.embedding(e + "position_embeddings", max_pos, h, s)
        net.add(e[:-1] + ":add", 6 * s * h)
        regs += word + pos + types + net.norm(e + "LayerNorm", h, s, True)
        b = e[: -len("embeddings.")]
        for i in range(n_layers):
            p = f"{b}encoder.layer.{i}."
            for proj in ("query", "key", "value"):
                regs += net.lin(f"{p}attention.self.{proj}", h, h, s, True)
            net.op(p + "attention.self:attention", [], attn_fwd, attn_act)
            regs += net.lin(p + "attention.output.dense", h, h, s, True)
            net.add(p + "attention.output:add", 3 * s * h)
            regs += net.norm(p + "attention.output.LayerNorm", h, s, True)
            regs += net.lin(p + "intermediate.dense", h, f, s, True)
            net.op(p + "intermediate.intermediate_act_fn", [], 0, 2 * s * f, saves="inputs")  # GELU
            regs += net.lin(p + "output.dense", f, h, s, True)
            net.add(p + "output:add", 3 * s * h)
            regs += net.norm(p + "output.LayerNorm", h, s, True)
        if head != "none":  # the pooler reads the first token only
            regs += net.lin(b + "pooler.dense", h, h, 1, True)
            net.op(b + "pooler.activation", [], 0, 2 * h)
        if head == "pretraining":  # HF computes the MLM logits at every position
            c = "cls.predictions."
            regs += [(c + "bias", vocab), *net.lin(c + "transform.dense", h, h, s, True)]
            net.op(c + "transform.transform_act_fn", [], 0, 2 * s * h, saves="inputs")  # GELU
            regs += net.norm(c + "transform.LayerNorm", h, s, True)
            net.op(c + "decoder", [(c + "bias", vocab)], 2.0 * s * h * vocab, s * (h + vocab), saves="inputs")
            regs += net.lin("cls.seq_relationship", h, 2, 1, True)
    if style != "bert" or head == "pretraining":
        net.op("loss", [], 0, 2 * s * vocab)  # softmax cross-entropy reads the logits, writes their gradient
    net.register(regs)


def _block_counts(v: Any) -> list[int]:
    if not isinstance(v, list) or len(v) != 4:
        raise ValueError("expected a list of 4 positive integers (blocks per stage)")
    try:
        return [_pos_int(x) for x in v]
    except ValueError:
        raise ValueError("expected a list of 4 positive integers (blocks per stage)") from None


def _resnet(a: _Fields, net: _Net) -> None:
    bottleneck = a.get("block", _choice("basic", "bottleneck")) == "bottleneck"
    counts = a.get("layers", _block_counts)
    width, groups = a.get("width", _pos_int, 64), a.get("groups", _pos_int, 1)
    classes, side = a.get("num_classes", _pos_int, 1000), a.get("image", _pos_int, 224)
    if not bottleneck and (width, groups) != (64, 1):
        raise a.fail("width", "torchvision's BasicBlock only supports width 64 and groups 1")
    regs: _Params = []

    def conv(name: str, c_in: int, c_out: int, k: int, stride: int, size: int, g: int = 1, bwd_x: int = 2) -> int:
        """Append a k x k convolution (padding k // 2, no bias) and its BatchNorm; return the output side."""
        out = (size + 2 * (k // 2) - k) // stride + 1
        fwd = 2.0 * k * k * (c_in // g) * c_out * out * out
        bn = name[:-1] + "1" if name.endswith(".0") else name.replace("conv", "bn")
        regs.extend(net.op(name, [(f"{name}.weight", k * k * (c_in // g) * c_out)], fwd,
                           c_in * size * size + c_out * out * out, bwd=bwd_x * fwd, saves="inputs"))
        regs.extend(net.norm(bn, c_out, out * out, True))
        return out

    # conv1 reads the image: no gradient wrt its input, backward = 1 x forward
    hw = conv("conv1", a.get("in_channels", _pos_int, 3), 64, 7, 2, side, bwd_x=1)
    net.op("relu", [], 0, 2 * 64 * hw * hw)
    pooled = (hw - 1) // 2 + 1  # MaxPool2d(3, stride 2, padding 1)
    net.op("maxpool", [], 0, 64 * (hw * hw + pooled * pooled))
    hw, expansion, inplanes = pooled, (4 if bottleneck else 1), 64
    for stage, n_blocks in enumerate(counts):
        planes = 64 * 2**stage
        for j in range(n_blocks):
            p, stride = f"layer{stage + 1}.{j}.", (2 if stage and not j else 1)
            mid = planes * width // 64 * groups if bottleneck else planes
            # (kernel, stride, groups, out channels) of conv1..conv3 (Bottleneck) or conv1..conv2 (BasicBlock)
            convs = ([(1, 1, 1, mid), (3, stride, groups, mid), (1, 1, 1, planes * 4)] if bottleneck
                     else [(3, stride, 1, planes), (3, 1, 1, planes)])
            c, size = inplanes, hw
            for n, (k, st, g, c_out) in enumerate(convs, 1):
                size = conv(f"{p}conv{n}", c, c_out, k, st, size, g)
                if n < len(convs):
                    net.op(f"{p}relu:{n}", [], 0, 2 * c_out * size * size)
                c = c_out
            if stride != 1 or inplanes != planes * expansion:
                conv(f"{p}downsample.0", inplanes, c, 1, stride, hw)
            hw, inplanes = size, c
            net.add(f"{p[:-1]}:add", 3 * c * hw * hw)
            net.op(f"{p}relu:{len(convs)}", [], 0, 2 * c * hw * hw)
    net.op("avgpool", [], 0, inplanes * (hw * hw + 1), saves="inputs")  # adaptive pooling's backward: the input
    regs += net.lin("fc", inplanes, classes, 1, True)
    net.register(regs)


# ----------------------------------------------------------------------------------------------------------------
# Loading


def builtin_models() -> list[str]:
    """Names of the built-in models (``collsim/training/models/*.yaml``), sorted."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a built-in model by name or a model YAML file (schema: this module's docstring).

    Parameters
    ----------
    name_or_path : str or Path
        A name from :func:`builtin_models` or a path to a ``.yaml`` file.

    Returns
    -------
    ModelSpec

    Raises
    ------
    ModelError
        Naming the file and the field, and what was expected.

    Examples
    --------
    >>> load_model("resnet50").n_params
    25557032
    >>> round(load_model("gpt2-xl").fwd_flops() / 1e12, 2)  # forward TFLOPs per 1024-token sample
    3.51
    """
    if not isinstance(name_or_path, Path) and name_or_path in builtin_models():
        return _load_file(str(MODELS_DIR / f"{name_or_path}.yaml"))
    path = Path(name_or_path)
    if isinstance(name_or_path, str) and path.suffix not in (".yaml", ".yml") and not path.exists():
        raise ModelError(f"unknown model {name_or_path!r}; expected one of {', '.join(builtin_models())} "
                         "or a path to a .yaml file")
    return _read(path)


@functools.cache
def _load_file(path: str) -> ModelSpec:  # built-ins only: they do not change while running
    return _read(Path(path))


def _read(path: Path) -> ModelSpec:
    try:
        data = yaml.safe_load(read_text_file(path))
    except FileReadError as exc:
        raise ModelError(str(exc), path) from None
    except yaml.YAMLError as exc:
        raise ModelError(f"broken YAML: {exc}", path) from None
    top = _Fields(data, path, "", {"name", "source", "dtype", "act_dtype", "architecture", "params", "layers",
                                   "batch_size"})  # fmt: skip
    name, source = top.get("name", _string), top.get("source", _string)
    batch = top.get("batch_size", _pos_int, None)
    dtype = top.get("dtype", _dtype, "float32")
    act_dtype = top.get("act_dtype", _dtype, dtype)
    if top.has("architecture") == (top.has("params") or top.has("layers")):
        raise top.fail("architecture", "expected either architecture or params and layers (exactly one form)")
    if top.has("architecture"):
        raw = top.get("architecture", lambda v: v)
        kind = _Fields(raw, path, "architecture", _TRANSFORMER_FIELDS | _RESNET_FIELDS).get(
            "kind", _choice("transformer", "resnet"))
        a = _Fields(raw, path, "architecture", _TRANSFORMER_FIELDS if kind == "transformer" else _RESNET_FIELDS)
        net = _Net(DTYPE_BYTES[act_dtype])
        (_transformer if kind == "transformer" else _resnet)(a, net)
        params = [Param(n, k, dtype) for n, k in net.params]
        layers = net.layers
    else:
        params, layers = _explicit(top, dtype)
    index = {p.name: i for i, p in enumerate(params)}
    try:
        return ModelSpec(name, tuple(params), tuple(
            Layer(n, tuple(index[k] for k in ps), fwd, bwd, act, t_fwd, t_bwd, saves)
            for n, ps, fwd, bwd, act, t_fwd, t_bwd, saves in layers), source, act_dtype, batch)
    except ModelError as exc:
        raise ModelError(exc.message, path, exc.field) from None


def _list(top: _Fields, key: str) -> Iterator[tuple[int, Any]]:
    items = top.get(key, lambda v: v)
    if not isinstance(items, list) or not items:
        raise top.fail(key, f"expected a non-empty list, got {items!r}")
    return enumerate(items)


def _explicit(top: _Fields, dtype: str) -> tuple[list[Param], list[_RawLayer]]:
    params = []
    for i, item in _list(top, "params"):
        f = _Fields(item, top.file, f"params.{i}", {"name", "numel", "dtype"})
        params.append(Param(f.get("name", _string), f.get("numel", _pos_int), f.get("dtype", _dtype, dtype)))
    names = {p.name for p in params}
    layers: list[_RawLayer] = []
    for j, item in _list(top, "layers"):
        f = _Fields(item, top.file, f"layers.{j}", {"name", "params", "fwd_flops", "bwd_flops", "act_bytes",
                                                    "fwd_time_s", "bwd_time_s", "saves"})
        refs = f.get("params", lambda v: v, [])
        if not isinstance(refs, list) or any(r not in names for r in refs):
            raise f.fail("params", f"expected a list of names from params, got {refs!r}")
        fwd = f.get("fwd_flops", _number)
        layers.append((f.get("name", _string), refs, fwd, f.get("bwd_flops", _number, 2 * fwd if refs else fwd),
                       f.get("act_bytes", _number, 0.0), f.get("fwd_time_s", _number, None),
                       f.get("bwd_time_s", _number, None), f.get("saves", _choice(*SAVES), "outputs")))
    return params, layers


# ----------------------------------------------------------------------------------------------------------------
# From a torch module


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    import torch

    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, list | tuple):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)


def model_from_module(module: torch.nn.Module, example_input: Any, name: str | None = None) -> ModelSpec:
    """Describe a torch module by running it once on CPU under ``torch.utils.flop_counter.FlopCounterMode``.

    Parameters are ``module.named_parameters()`` in order. Layers are the modules in forward execution order
    (forward hooks, first call) that own parameters (``recurse=False``), that do compute of their own (FLOPs the
    counter attributes to the module minus its children's), or that are called leaves (ReLU: activation bytes
    only). A shared parameter goes to the first layer that owns it (its gradient is complete after that layer's
    backward, the last); modules never called keep their parameters in zero-cost layers at the end (DDP with
    ``find_unused_parameters`` marks them ready at the start of backward). Backward = 2 x forward FLOPs for a layer
    that owns parameters, 1 x otherwise (an estimate: a weightless matmul needs 2 x). ``act_bytes`` = bytes of the
    tensors each call takes and returns; ``act_dtype`` = the first parameter's dtype.

    Parameters
    ----------
    module : torch.nn.Module
        The model; it runs once under ``torch.no_grad()`` in its current mode and device.
    example_input : Any
        A tensor (``module(x)``), a tuple (``module(*x)``) or a dict (``module(**x)``); dim 0 of its first tensor is
        the batch size that FLOPs and bytes are divided by (per-sample figures).
    name : str, optional
        Model name; default the module's class name.

    Raises
    ------
    ModelError
        When torch is missing (``pip install -e '.[bench]'``), a dtype is not in :data:`DTYPE_BYTES`, or no batch
        size can be found.
    """
    try:
        import torch
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        raise ModelError("model_from_module needs torch: pip install -e '.[bench]'") from None
    first = next(_tensors(example_input), None)
    if first is None or first.dim() == 0 or first.shape[0] == 0:
        raise ModelError("example_input has no tensor with a batch dimension (dim 0)", field="example_input")
    batch = int(first.shape[0])
    params: list[Param] = []
    pid: dict[int, int] = {}  # id(parameter) -> index
    for pname, p in module.named_parameters():
        dtype = str(p.dtype).removeprefix("torch.")
        if dtype not in DTYPE_BYTES:
            raise ModelError(f"unsupported dtype {dtype}; expected one of {sorted(DTYPE_BYTES)}", field=pname)
        pid[id(p)] = len(params)
        params.append(Param(pname, p.numel(), dtype))
    keys: dict[torch.nn.Module, str] = {}  # the names FlopCounterMode's ModuleTracker gives
    nn = torch.nn
    # modules whose backward keeps only their inputs and parameters (the rest: ``outputs``, the safe side)
    saves_inputs = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding, nn.GELU, nn.SiLU)

    def walk(mod: torch.nn.Module, key: str) -> None:
        keys[mod] = key
        for child_name, child in mod.named_children():
            walk(child, f"{key}.{child_name}")

    walk(module, type(module).__name__)
    fqn = {mod: n for n, mod in module.named_modules()}
    called: dict[torch.nn.Module, float] = {}  # first-call order, activation bytes

    def hook(mod: torch.nn.Module, args: Any, kwargs: Any, out: Any) -> None:
        called[mod] = called.get(mod, 0.0) + sum(t.numel() * t.element_size() for t in _tensors([args, kwargs, out]))

    handles = [mod.register_forward_hook(hook, with_kwargs=True) for mod in fqn]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            if isinstance(example_input, tuple):
                module(*example_input)
            elif isinstance(example_input, dict):
                module(**example_input)
            else:
                module(example_input)
    finally:
        for handle in handles:
            handle.remove()
    counts = {k: float(sum(v.values())) for k, v in counter.get_flop_counts().items()}
    layers: list[Layer] = []
    owned: set[int] = set()
    for mod in [*called, *(m for m in fqn if m not in called)]:
        own = [p for p in mod.parameters(recurse=False) if id(p) in pid]
        children = list(mod.children())
        flops = counts.get(keys[mod], 0.0) - sum(counts.get(keys[c], 0.0) for c in children)
        flops = max(flops, 0.0) if mod in called else 0.0
        if not own and flops == 0 and (children or mod not in called):
            continue
        mine = tuple(pid[id(p)] for p in own if id(p) not in owned)
        owned.update(id(p) for p in own)
        saves = "inputs" if isinstance(mod, saves_inputs) else "outputs"
        layers.append(Layer(fqn[mod] or type(mod).__name__, mine, flops / batch, flops / batch * (2 if own else 1),
                            called.get(mod, 0.0) / batch, saves=saves))
    return ModelSpec(name or type(module).__name__, tuple(params), tuple(layers),
                     f"torch {torch.__version__} FlopCounterMode and forward hooks on {type(module).__name__}, "
                     f"batch {batch}", params[0].dtype if params else "float32")

"""Model descriptions: built-in parameter counts and names, FLOP totals against closed forms, YAML errors, torch."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from collsim.training.model import (
    DTYPE_BYTES,
    Layer,
    ModelError,
    ModelSpec,
    Param,
    builtin_models,
    load_model,
    model_from_module,
)

MODELS_DIR = Path(__file__).resolve().parents[2] / "collsim" / "training" / "models"


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def names(spec: ModelSpec) -> list[str]:
    return [p.name for p in spec.params]


def test_builtin_list_and_headers() -> None:
    assert builtin_models() == ["bert-large", "gpt2", "gpt2-xl", "llama-7b", "resnet50"]
    for name in builtin_models():
        spec = load_model(name)
        assert spec.name == name and spec.source
        assert (MODELS_DIR / f"{name}.yaml").read_text().startswith("# collsim model description")
        owners = sorted(i for layer in spec.layers for i in layer.params)
        assert owners == list(range(len(spec.params)))  # every parameter in exactly one layer
    assert load_model("resnet50") is load_model("resnet50")  # built-ins are cached (immutable)


# Published totals: torchvision ResNet50_Weights.IMAGENET1K_V1 meta num_params; HF GPT2LMHeadModel (gpt2 and
# gpt2-xl, tied head once); HF LlamaForCausalLM (Llama-2-7b-hf); HF BertModel (bert-large-uncased, with pooler).
@pytest.mark.parametrize(
    ("name", "n_params", "n_tensors"),
    [
        ("resnet50", 25_557_032, 161),
        ("gpt2", 124_439_808, 2 + 12 * 12 + 2),
        ("gpt2-xl", 1_557_611_200, 2 + 48 * 12 + 2),
        ("llama-7b", 6_738_415_616, 1 + 32 * 9 + 2),
    ],
)
def test_published_parameter_counts(name: str, n_params: int, n_tensors: int) -> None:
    spec = load_model(name)
    assert spec.n_params == n_params and len(spec.params) == n_tensors
    assert spec.param_bytes == 4 * n_params


def test_bert_large_pretraining_and_bertmodel(tmp_path: Path) -> None:
    h, vocab = 1024, 30522
    heads = (h * h + h) + 2 * h + vocab + (2 * h + 2)  # transform dense, LayerNorm, decoder bias, NSP
    spec = load_model("bert-large")
    assert spec.n_params == 335_141_888 + heads == 336_226_108
    assert names(spec)[:3] == [f"bert.embeddings.{e}_embeddings.weight" for e in ("word", "position", "token_type")]
    assert names(spec)[-7:] == [
        "cls.predictions.bias",
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.LayerNorm.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
    ]
    text = (MODELS_DIR / "bert-large.yaml").read_text().replace("head: pretraining", "head: pooler")
    model = load_model(write(tmp_path, text))
    assert model.n_params == 335_141_888  # HF BertModel(bert-large-uncased)
    assert names(model)[0] == "embeddings.word_embeddings.weight" and names(model)[-1] == "pooler.dense.bias"
    bare = load_model(write(tmp_path, text.replace("head: pooler", "head: none"), "none.yaml"))
    assert bare.n_params == 335_141_888 - (h * h + h)


def test_resnet50_torchvision_names() -> None:
    spec = load_model("resnet50")
    n = names(spec)
    assert n[:3] == ["conv1.weight", "bn1.weight", "bn1.bias"]
    assert n[3:6] == ["layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias"]
    i = n.index("layer1.0.bn3.bias")
    assert n[i + 1 : i + 4] == [f"layer1.0.downsample.{x}" for x in ("0.weight", "1.weight", "1.bias")]
    assert [x for x in n if "downsample.0" in x] == [f"layer{k}.0.downsample.0.weight" for k in range(1, 5)]
    assert n[-2:] == ["fc.weight", "fc.bias"]
    assert spec.params[n.index("layer4.2.conv3.weight")].numel == 512 * 2048
    layers = [layer.name for layer in spec.layers]
    assert layers[:4] == ["conv1", "bn1", "relu", "maxpool"] and layers[-2:] == ["avgpool", "fc"]
    j = layers.index("layer1.0.bn3")
    assert layers[j : j + 5] == ["layer1.0.bn3", "layer1.0.downsample.0", "layer1.0.downsample.1", "layer1.0:add",
                                 "layer1.0.relu:3"]


def test_transformer_names_and_tied_embeddings() -> None:
    gpt = load_model("gpt2-xl")
    assert names(gpt)[:3] == ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight"]
    assert names(gpt)[-2:] == ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    assert "lm_head.weight" not in names(gpt)
    assert gpt.layers[0].name == "transformer.wte" and gpt.layers[0].params == (0,)  # grad complete after the last bwd
    lm_head = next(layer for layer in gpt.layers if layer.name == "lm_head")
    assert lm_head.params == () and lm_head.fwd_flops == 2 * 1024 * 1600 * 50257
    llama = load_model("llama-7b")
    assert names(llama)[:2] == ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"]
    assert names(llama)[8:11] == ["model.layers.0.input_layernorm.weight",
                                  "model.layers.0.post_attention_layernorm.weight",
                                  "model.layers.1.self_attn.q_proj.weight"]
    assert names(llama)[-2:] == ["model.norm.weight", "lm_head.weight"]
    order = [layer.name for layer in llama.layers]
    assert order[1:4] == ["model.layers.0.input_layernorm", "model.layers.0.self_attn.q_proj",
                          "model.layers.0.self_attn.k_proj"]
    assert order[-2:] == ["lm_head", "loss"]


def test_gpt2_flops_match_narayanan() -> None:
    # Narayanan et al. 2021 eq. 3 without recomputation: fwd + bwd = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    spec = load_model("gpt2-xl")
    s, lay, h, vocab = 1024, 48, 1600, 50257
    closed = 72 * s * lay * h**2 * (1 + s / (6 * h) + vocab / (12 * lay * h))
    assert 3 * spec.fwd_flops() == pytest.approx(closed, rel=1e-9)  # exact: the same matmuls
    assert sum(layer.bwd_flops for layer in spec.layers) == pytest.approx(2 * spec.fwd_flops())
    assert spec.fwd_flops() == pytest.approx(3.5067e12, rel=1e-4)


def test_llama_flops_match_palm() -> None:
    # Chowdhery et al. 2022 (PaLM), appendix B: training FLOPs per token 6N + 12 L H Q T, N without the input
    # embedding (a lookup); here N also holds the RMSNorm weights (0.004%), hence the tolerance.
    spec = load_model("llama-7b")
    s, lay, h, vocab = 4096, 32, 4096, 32000
    closed = s * (6 * (spec.n_params - vocab * h) + 12 * lay * h * s)
    assert 3 * spec.fwd_flops() == pytest.approx(closed, rel=0.01)
    assert spec.fwd_flops() == pytest.approx(6.2921e13, rel=1e-4)


def test_bert_flops_within_one_percent() -> None:
    spec = load_model("bert-large")
    s, lay, h, vocab = 128, 24, 1024, 30522
    closed = 24 * s * lay * h**2 * (1 + s / (6 * h) + vocab / (12 * lay * h))  # encoder + MLM decoder
    assert spec.fwd_flops() == pytest.approx(closed, rel=0.01)
    assert spec.fwd_flops() == pytest.approx(closed + 2 * s * h * h + 2 * h * h + 2 * h * 2)  # transform, pooler, NSP


def test_resnet50_flops_match_torchvision() -> None:
    # torchvision ResNet50_Weights.IMAGENET1K_V1 "_ops": 4.089 (GFLOPS counted as multiply-adds), 224 x 224.
    spec = load_model("resnet50")
    assert spec.fwd_flops() / 2 == pytest.approx(4.089e9, rel=0.01)
    conv1 = spec.layers[0]
    assert conv1.fwd_flops == 2 * 7 * 7 * 3 * 64 * 112 * 112 and conv1.bwd_flops == conv1.fwd_flops  # no input grad
    fc = spec.layers[-1]
    assert fc.fwd_flops == 2 * 2048 * 1000 and fc.bwd_flops == 2 * fc.fwd_flops
    assert spec.layer_param_bytes(len(spec.layers) - 1) == 4 * (2048 * 1000 + 1000)


def test_with_dtype_and_activation_bytes() -> None:
    spec = load_model("gpt2-xl")
    assert spec.act_dtype == "float32"
    assert spec.layers[1].act_bytes == 4 * 2 * 1024 * 1600  # wpe: read and write s x h elements
    half = spec.with_dtype("bfloat16")
    assert half.param_bytes == spec.param_bytes // 2 and {p.dtype for p in half.params} == {"bfloat16"}
    assert half.layers[1].act_bytes == spec.layers[1].act_bytes / 2 and half.fwd_flops() == spec.fwd_flops()
    amp = spec.with_dtype("float32", act_dtype="float16")
    assert amp.param_bytes == spec.param_bytes and amp.act_dtype == "float16"
    with pytest.raises(ModelError, match="dtype: unknown dtype 'tf32'"):
        spec.with_dtype("tf32")
    assert DTYPE_BYTES == {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def test_eager_attention_moves_the_scores(tmp_path: Path) -> None:
    text = (MODELS_DIR / "gpt2-xl.yaml").read_text() + "  attention: eager\n"
    eager, fused = load_model(write(tmp_path, text)), load_model("gpt2-xl")
    pick = "transformer.h.0.attn:attention"
    diff = next(x.act_bytes for x in eager.layers if x.name == pick) - next(
        x.act_bytes for x in fused.layers if x.name == pick)
    assert diff == 4 * 4 * 25 * 1024 * 1024


EXPLICIT = """\
    name: tiny
    source: test
    params:
      - {name: a.weight, numel: 6}
      - {name: a.bias, numel: 3, dtype: float16}
    layers:
      - {name: a, params: [a.weight, a.bias], fwd_flops: 36}
      - {name: act, fwd_flops: 0, act_bytes: 24, fwd_time_s: 1.0e-6}
    """


def test_explicit_form_defaults(tmp_path: Path) -> None:
    spec = load_model(write(tmp_path, EXPLICIT))
    assert spec.params == (Param("a.weight", 6), Param("a.bias", 3, "float16"))
    assert spec.param_bytes == 6 * 4 + 3 * 2 and spec.layer_param_bytes(0) == 30
    assert spec.layers == (Layer("a", (0, 1), 36.0, 72.0, 0.0), Layer("act", (), 0.0, 0.0, 24.0, 1e-6, None))
    assert spec.layers[0].saves == "outputs"  # the default: the recomputation runs a layer's kernel
    with pytest.raises(ModelError, match="saves: expected one of inputs, outputs, nothing, got 'all'"):
        Layer("x", (), 0.0, 0.0, 0.0, saves="all")


def test_built_in_layers_say_what_they_save() -> None:
    gpt = {layer.name: layer.saves for layer in load_model("gpt2-xl").layers}
    assert [gpt[f"transformer.h.0.{k}"] for k in ("ln_1", "attn.c_attn", "attn:attention", "mlp.act", "mlp.c_proj")] \
        == ["outputs", "inputs", "outputs", "inputs", "inputs"]
    assert gpt["transformer.h.0:add2"] == "nothing" and gpt["transformer.wte"] == "inputs"
    resnet = {layer.name: layer.saves for layer in load_model("resnet50").layers}
    assert (resnet["layer1.0.conv1"], resnet["layer1.0.bn1"], resnet["layer1.0:add"], resnet["layer1.0.relu:3"]) \
        == ("inputs", "outputs", "nothing", "outputs")


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("dtype: float16", "dtype: tf32", "params.1.dtype: expected one of float32, float16, bfloat16, float64"),
        ("name: act, fwd", "name: act, params: [a.bias], fwd", "layers.1.params: parameter 'a.bias' is already in"),
        ("fwd_flops: 36", "flops: 36", "layers.0.flops: unknown field"),
        ("name: a, params", "params", "layers.0.name: missing field"),
        ("source: test\n", "", "source: missing field"),
        ("numel: 6", "numel: -6", "params.0.numel: expected a positive integer, got -6"),
        ("fwd_flops: 36", "fwd_flops: .nan", "layers.0.fwd_flops: expected a finite number >= 0"),
        ("[a.weight, a.bias]", "[a.weight, b]", "layers.0.params: expected a list of names from params"),
        ("name: act,", "name: a,", "layers.1.name: layer 'a' listed twice"),
        ("name: tiny", "name: tiny\narchitecture: {kind: resnet}", "architecture: expected either architecture"),
        ("name: act, fwd", "name: act, params: [], fwd", ""),  # fine
        ("name: act, fwd", "name: act, saves: weights, fwd",
         "layers.1.saves: expected one of inputs, outputs, nothing, got 'weights'"),
        ("name: act, fwd", "name: act, saves: nothing, fwd", ""),  # fine
    ],
)
def test_explicit_errors_name_file_and_field(tmp_path: Path, old: str, new: str, where: str) -> None:
    text = textwrap.dedent(EXPLICIT)
    assert old in text
    path = write(tmp_path, text.replace(old, new), "bad.yaml")
    if not where:
        assert load_model(path).n_params == 9
        return
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert str(info.value).startswith(f"{info.value.file}: ") and info.value.file is not None
    assert info.value.file.endswith("bad.yaml") and where in str(info.value)


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("  hidden: 1600\n", "", "architecture.hidden: missing field"),
        ("heads: 25", "heads: 24", "architecture.heads: hidden (1600) must be a multiple of heads (24)"),
        ("norm: layernorm", "norm: rmsnorm", "architecture.norm: style gpt2 has norm 'layernorm'"),
        ("seq_len: 1024\n", "seq_len: 2048\n", "architecture.seq_len: 2048 tokens exceed max_positions (1024)"),
        ("style: gpt2", "style: gpt2\n  kv_heads: 5", "architecture.kv_heads: not used by style gpt2"),
        ("kind: transformer", "kind: mlp", "architecture.kind: expected one of transformer, resnet, got 'mlp'"),
        ("dtype: float32", "dtype: fp32", "dtype: expected one of float32"),
    ],
)
def test_architecture_errors(tmp_path: Path, old: str, new: str, where: str) -> None:
    text = (MODELS_DIR / "gpt2-xl.yaml").read_text()
    assert old in text
    with pytest.raises(ModelError, match=r"gpt2\.yaml: ") as info:
        load_model(write(tmp_path, text.replace(old, new, 1), "gpt2.yaml"))
    assert where in str(info.value)


def test_resnet_layers_field_and_unknown_names(tmp_path: Path) -> None:
    text = (MODELS_DIR / "resnet50.yaml").read_text().replace("[3, 4, 6, 3]", "[3, 4, 6]")
    with pytest.raises(ModelError, match=r"architecture\.layers: expected a list of 4 positive integers"):
        load_model(write(tmp_path, text))
    basic = (MODELS_DIR / "resnet50.yaml").read_text().replace("bottleneck", "basic")
    basic = basic.replace("[3, 4, 6, 3]", "[2, 2, 2, 2]")
    assert load_model(write(tmp_path, basic, "r18.yaml")).n_params == 11_689_512  # torchvision resnet18 num_params
    with pytest.raises(ModelError, match="unknown model 'resnet-50'; expected one of bert-large, gpt2, gpt2-xl"):
        load_model("resnet-50")
    with pytest.raises(ModelError, match=r"nope\.yaml: file not found"):
        load_model(tmp_path / "nope.yaml")
    with pytest.raises(ModelError, match="broken YAML"):
        load_model(write(tmp_path, "name: [", "broken.yaml"))


def test_modelspec_checks() -> None:
    layer = Layer("l", (0,), 1.0, 2.0, 0.0)
    with pytest.raises(ModelError, match="layers: parameters in no layer: b"):
        ModelSpec("m", (Param("a", 1), Param("b", 1)), (layer,), "s")
    with pytest.raises(ModelError, match=r"layers\.0\.params: parameter index 3 out of range"):
        ModelSpec("m", (Param("a", 1),), (Layer("l", (3,), 1.0, 2.0, 0.0),), "s")
    with pytest.raises(ModelError, match=r"layers\.0\.bwd_flops: expected a finite number >= 0, got -2"):
        ModelSpec("m", (Param("a", 1),), (Layer("l", (0,), 1.0, -2, 0.0),), "s")
    with pytest.raises(ModelError, match=r"params\.0\.dtype: unknown dtype 'int8'"):
        ModelSpec("m", (Param("a", 1, "int8"),), (layer,), "s")
    with pytest.raises(ModelError, match=r"params\.0\.numel: expected a positive integer, got 0"):
        ModelSpec("m", (Param("a", 0),), (layer,), "s")


# ----------------------------------------------------------------------------------------------------------------
# model_from_module (needs torch: pip install -e '.[bench]')


def _torch() -> Any:
    return pytest.importorskip("torch", reason="model_from_module needs torch: pip install -e '.[bench]'")


@pytest.mark.bench
def test_from_module_mlp() -> None:
    torch = _torch()
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    batch = 5
    spec = model_from_module(net, torch.randn(batch, 16), "mlp")
    assert spec.name == "mlp" and spec.n_params == sum(p.numel() for p in net.parameters())
    assert names(spec) == [n for n, _ in net.named_parameters()]
    assert [layer.name for layer in spec.layers] == ["0", "1", "2"]
    first, relu, last = spec.layers
    assert first.fwd_flops == 2 * 16 * 32 and first.bwd_flops == 2 * first.fwd_flops  # per sample: 2 B in out / B
    assert last.fwd_flops == 2 * 32 * 8 and relu.fwd_flops == 0 and relu.params == ()
    assert first.params == (0, 1) and first.act_bytes == 4 * (16 + 32)
    assert spec.with_dtype("float16").param_bytes == 2 * spec.n_params
    # what each keeps for its backward: addmm its input and weight, ReLU its result
    assert [layer.saves for layer in spec.layers] == ["inputs", "outputs", "inputs"]


@pytest.mark.bench
def test_from_module_conv_net_order_and_own_compute() -> None:
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(8, 10)  # registered first, runs last
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(8)
            self.scale = torch.nn.Parameter(torch.ones(8, 8))  # used by Net.forward itself
            self.unused = torch.nn.Linear(2, 2)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
            return self.head(y @ self.scale)

    net, batch = Net(), 4
    spec = model_from_module(net, (torch.randn(batch, 3, 6, 6),))
    assert spec.name == "Net" and spec.n_params == sum(p.numel() for p in net.parameters())
    assert names(spec)[:2] == ["scale", "head.weight"]
    order = [layer.name for layer in spec.layers]
    assert order == ["conv", "bn", "head", "Net", "unused"]  # forward order; own compute after children; unused last
    conv, bn, head, own, unused = spec.layers
    assert conv.fwd_flops == 2 * 3 * 3 * 3 * 8 * 6 * 6 and bn.fwd_flops == 0
    assert head.fwd_flops == 2 * 8 * 10 and own.fwd_flops == 2 * 8 * 8 and own.params == (0,)
    assert unused.fwd_flops == 0 and unused.act_bytes == 0 and len(unused.params) == 2
    assert conv.act_bytes == 4 * (3 + 8) * 36


@pytest.mark.bench
def test_from_module_tied_parameter_goes_to_first_user() -> None:
    torch = _torch()

    class Lm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(20, 6)
            self.out = torch.nn.Linear(6, 20, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, ids: Any) -> Any:
            return self.out(self.emb(ids))

    spec = model_from_module(Lm(), torch.randint(0, 20, (3, 7)))
    assert names(spec) == ["emb.weight"]
    assert [(layer.name, layer.params) for layer in spec.layers] == [("emb", (0,)), ("out", ())]
    assert spec.layers[1].fwd_flops == 2 * 7 * 6 * 20 and spec.layers[1].bwd_flops == 2 * spec.layers[1].fwd_flops
    with pytest.raises(ModelError, match="example_input has no tensor"):
        model_from_module(Lm(), {"ids": 3})


def test_exponents_without_a_sign_are_numbers_as_in_yaml_1_2() -> None:
    # PyYAML (YAML 1.1) reads 2.0e6 as a string; the model file takes it as the number it is
    spec = load_model(Path(__file__).parent / "data" / "mlp-measured.yaml")
    assert [ly.fwd_flops for ly in spec.layers] == [2.0e6, 2.0e6, 2.0e4]
    assert [ly.bwd_time_s for ly in spec.layers] == [0.020, 0.020, 0.002]

"""Activation checkpointing (``training.activation_checkpointing``): each checkpointed block's forward runs again
right before its first backward kernel, in DDP and in both FSDP versions; checked on a model of two blocks of two
layers with measured times (every time exact)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError
from collsim.training import (
    DdpConfig,
    GpuCompute,
    Layer,
    ModelSpec,
    Param,
    StepConstants,
    StepResult,
    checkpoint_regions,
    layer_blocks,
    load_model,
    simulate_ddp_step,
)
from collsim.training.fsdp import FsdpConfig, simulate_fsdp_step

MB4 = 1 << 20  # elements of one 4 MiB float32 parameter
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0)}, 0.0)
GPU = GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0)
NAMES = ["embed", "h.0.a", "h.0.b", "h.1.a", "h.1.b", "head"]
FWD, BWD = 1e-3, 2e-3


def _model() -> ModelSpec:
    params = tuple(Param(f"{n}.weight", MB4) for n in NAMES)
    layers = tuple(Layer(n, (i,), 0.0, 0.0, 0.0, fwd_time_s=FWD, bwd_time_s=BWD) for i, n in enumerate(NAMES))
    return ModelSpec("tiny", params, layers, "test")


def _compute_labels(r: StepResult) -> list[str]:
    spans = sorted((s for s in r.spans if s.lane == "compute"), key=lambda s: (s.start, s.end))
    return [s.label for s in spans if s.label.split()[0] in ("fwd", "bwd", "recompute")]


def test_blocks_and_regions_follow_the_pattern() -> None:
    assert layer_blocks(NAMES) == ["", "h.0", "h.0", "h.1", "h.1", ""]
    assert layer_blocks(NAMES, "h.*.a") == ["", "h.0.a", "", "h.1.a", "", ""]
    assert layer_blocks(NAMES, "h") == layer_blocks(NAMES)  # a bare prefix
    assert checkpoint_regions(_model()) == {2: (1, 2), 4: (3, 4)}  # a block's last layer -> its layers
    assert checkpoint_regions(_model(), "h.*.a") == {1: (1,), 3: (3,)}
    with pytest.raises(ValueError, match=re.escape("pattern 'x.*' matches no layer of model 'tiny'")):
        checkpoint_regions(_model(), "x.*")


def _saving(saves: list[str]) -> ModelSpec:
    """One block ``h.0`` of len(saves) layers saving what ``saves`` says, between an embedding and a head."""
    names = ["embed", *[f"h.0.l{k}" for k in range(len(saves))], "head"]
    kinds = ["inputs", *saves, "inputs"]
    params = tuple(Param(f"{n}.weight", MB4) for n in names)
    layers = tuple(Layer(n, (i,), 0.0, 0.0, 0.0, fwd_time_s=FWD, bwd_time_s=BWD, saves=kind)
                   for i, (n, kind) in enumerate(zip(names, kinds, strict=True)))  # fmt: skip
    return ModelSpec("saving", params, layers, "test")


@pytest.mark.parametrize(("saves", "again"), [
    (["outputs", "inputs", "nothing"], (1,)),  # a norm, a linear (packs before its kernel), an add: the norm only
    (["inputs", "outputs", "nothing"], (1, 2)),  # a linear, a ReLU (packs its result): both
    (["inputs", "inputs"], (1,)),  # two linears: the second's inputs are the first's output
    (["inputs"], ()),  # one linear: its saved tensors are the block's input and its weight, nothing runs again
    (["nothing", "nothing"], ()),
])  # fmt: skip
def test_early_stop_ends_at_the_last_layer_that_saves_a_tensor(saves: list[str], again: tuple[int, ...]) -> None:
    model = _saving(saves)
    last = len(saves)
    assert checkpoint_regions(model, "h.*") == {last: again}
    assert checkpoint_regions(model, "h.*", early_stop=False) == {last: tuple(range(1, last + 1))}
    cfg = DdpConfig(batch_size=1, first_iteration=True, optimizer="none", activation_checkpointing=True)
    r = simulate_ddp_step(model, cfg, GPU, BARE, 8, nccl=lambda nbytes: (0.0, 0))
    assert r.compute_s == pytest.approx((len(saves) + 2) * (FWD + BWD) + len(again) * FWD, rel=1e-12)


def test_the_built_in_blocks_stop_where_their_last_saved_tensor_is() -> None:
    gpt = load_model("gpt2-xl")  # ... mlp.c_fc, mlp.act (GELU), mlp.c_proj (a linear), :add2
    regions = checkpoint_regions(gpt)
    block = min(regions)
    assert [gpt.layers[i].name.split(".", 3)[-1] for i in regions[block]][-2:] == ["mlp.c_fc", "mlp.act"]
    full = checkpoint_regions(gpt, early_stop=False)[block]
    assert len(full) == len(regions[block]) + 2  # mlp.c_proj and the residual add are not run again
    bert = load_model("bert-large")  # each layer ends with output.LayerNorm, which saves its statistics
    assert checkpoint_regions(bert) == checkpoint_regions(bert, early_stop=False)
    resnet = load_model("resnet50")  # each bottleneck ends with a ReLU, which saves its result
    assert checkpoint_regions(resnet, "layer*.*") == checkpoint_regions(resnet, "layer*.*", early_stop=False)


def test_ddp_recomputes_each_block_before_its_first_backward_kernel() -> None:
    # one bucket (first iteration) launched after the last gradient: every layer twice (3 ms) and each block's two
    # forwards again (4 x 1 ms), then the 1 ms allreduce
    cfg = DdpConfig(batch_size=1, first_iteration=True, optimizer="none", activation_checkpointing=True)
    r = simulate_ddp_step(_model(), cfg, GPU, BARE, 8, nccl=lambda nbytes: (1e-3, 0))
    assert r.compute_s == pytest.approx(6 * (FWD + BWD) + 4 * FWD, rel=1e-12)
    assert r.iteration_s == pytest.approx(r.compute_s + 1e-3, rel=1e-12)
    backward = _compute_labels(r)[6:]
    assert backward == ["bwd head", "recompute h.1.a", "recompute h.1.b", "bwd h.1.b", "bwd h.1.a",
                        "recompute h.0.a", "recompute h.0.b", "bwd h.0.b", "bwd h.0.a", "bwd embed"]  # fmt: skip
    assert any("activation checkpointing: 2 block(s)" in n for n in r.notes)
    plain = simulate_ddp_step(_model(), DdpConfig(batch_size=1, first_iteration=True, optimizer="none"), GPU, BARE,
                              8, nccl=lambda nbytes: (1e-3, 0))  # fmt: skip
    assert r.iteration_s - plain.iteration_s == pytest.approx(4 * FWD, rel=1e-9)
    assert not any("checkpointing" in n for n in plain.notes)


def test_ddp_buckets_become_ready_later_by_the_recomputation_before_them() -> None:
    # a bucket per parameter: the head's gradient is ready after its backward (no recomputation before it); h.1.b's
    # after h.1's two forwards again and its backward
    cfg = DdpConfig(batch_size=1, bucket_cap_mb=1, optimizer="none", activation_checkpointing=True)
    r = simulate_ddp_step(_model(), cfg, GPU, BARE, 8, nccl=lambda nbytes: (0.0, 0))
    forward = 6 * FWD
    ready = sorted(b.ready_s for b in r.buckets)
    assert ready[0] == pytest.approx(forward + BWD, rel=1e-9)
    assert ready[1] == pytest.approx(forward + BWD + 2 * FWD + BWD, rel=1e-9)


@pytest.mark.parametrize("version", [1, 2])
def test_fsdp_recomputes_on_the_units_gathered_parameters(version: int) -> None:
    # world 2, long all-gathers (5 ms): each block's backward all-gather ends before its recomputation starts, and
    # the recomputation directly precedes the block's first backward kernel
    cfg = FsdpConfig(batch_size=1, optimizer="none", version=version, activation_checkpointing=True)
    r = simulate_fsdp_step(_model(), cfg, GPU, BARE, 2, lambda kind, nbytes: (5e-3 if kind == "allgather" else 0.0, 0))
    plain = simulate_fsdp_step(_model(), FsdpConfig(batch_size=1, optimizer="none", version=version), GPU, BARE, 2,
                               lambda kind, nbytes: (5e-3 if kind == "allgather" else 0.0, 0))  # fmt: skip
    assert r.compute_s - plain.compute_s == pytest.approx(4 * FWD, rel=1e-9)
    labels = _compute_labels(r)
    for block in ("h.1", "h.0"):
        k = labels.index(f"recompute {block}.a")
        assert labels[k : k + 3] == [f"recompute {block}.a", f"recompute {block}.b", f"bwd {block}.b"]
    gathers = sorted((s for s in r.spans if s.lane == "NCCL all-gather stream"), key=lambda s: s.start)
    recompute = sorted(s.start for s in r.spans if s.label == "recompute h.1.a")
    assert len(gathers) == 5 and gathers[3].bucket == 2  # root, h.0, h.1 forward; h.1, h.0 backward
    assert recompute[0] >= gathers[3].end - 1e-12
    assert any("activation checkpointing: 2 block(s)" in n for n in r.notes)


def test_fsdp_refuses_a_checkpointed_block_across_units() -> None:
    cfg = FsdpConfig(batch_size=1, optimizer="none", wrap="h.*.b", activation_checkpointing=True)
    with pytest.raises(ValueError, match=re.escape("block 'h.0.a'.. spans FSDP units")):
        simulate_fsdp_step(_model(), cfg, GPU, BARE, 2, lambda kind, nbytes: (0.0, 0))
    # the whole block counts, not what early stop runs again (here only h.0.l0, in the root unit)
    two = FsdpConfig(batch_size=1, optimizer="none", wrap="h.*.l1", activation_checkpointing=True)
    assert checkpoint_regions(_saving(["inputs", "inputs"]), "h.*") == {2: (1,)}
    with pytest.raises(ValueError, match=re.escape("block 'h.0.l0'.. spans FSDP units (root), h.0.l1")):
        simulate_fsdp_step(_saving(["inputs", "inputs"]), two, GPU, BARE, 2, lambda kind, nbytes: (0.0, 0))


def test_the_scenario_field_turns_it_on_and_names_itself_in_errors() -> None:
    base = Simulator.from_source("fsdp-gpt2xl-2node-h100").step(["nccl"])[0]
    on = Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.activation_checkpointing=true"]).step(["nccl"])[0]
    full = Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.activation_checkpointing=true",
                                                             "training.checkpoint_early_stop=false"]).step(["nccl"])[0]
    # the 48 blocks' forward again: about a third more compute (less the embeddings and the LM head), a fifth with
    # early stop (each block's mlp.c_proj, a third of its matmuls, not run again)
    assert 1.25 * base.compute_s < full.compute_s < 1.34 * base.compute_s
    assert 1.17 * base.compute_s < on.compute_s < 1.25 * base.compute_s
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.activation_checkpointing='nope.*'"]).step(["nccl"])
    assert info.value.field == "training.activation_checkpointing"
    assert "pattern 'nope.*' matches no layer of model 'gpt2-xl'" in str(info.value)
    # a wrap pattern that matches no layer (a Llama name on GPT-2) would leave the root unit alone: refused the same
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.fsdp.wrap='model.layers.*'"]).step(["nccl"])
    assert info.value.field == "training.fsdp.wrap"
    assert ("pattern 'model.layers.*' matches no layer of model 'gpt2-xl' (its blocks: 'transformer.h.*' "
            "(transformer.h.0, transformer.h.1, ...))") in str(info.value)  # fmt: skip
    # the pattern the message offers works (it offered 'transformer.h.0', refused the same way)
    assert Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.fsdp.wrap='transformer.h.*'"])._fsdp_config()
    spans = ["training.activation_checkpointing='transformer.h.*'", "training.fsdp.wrap='transformer.h.*.mlp'"]
    with pytest.raises(ScenarioError, match="spans FSDP units") as info:
        Simulator.from_source("fsdp-gpt2xl-2node-h100", spans).step(["nccl"])
    assert info.value.field == "training.activation_checkpointing"
    ddp = Simulator.from_source("ddp-resnet50-dgx1-v100", ["training.activation_checkpointing='layer*.*'"])
    assert ddp.step(["nccl"])[0].compute_s > Simulator.from_source("ddp-resnet50-dgx1-v100").step(["nccl"])[0].compute_s


def test_the_measured_per_linear_checkpointing_costs_what_early_stop_says() -> None:
    """The bench's MLP checkpointed Linear by Linear on this VM (scenarios/measurements/checkpointing-cpu-2proc-mlp.*):
    with early stop nothing runs again, and the measured differences stay well under the forward (41.6 ms) that
    whole blocks would add."""
    data = Path(__file__).resolve().parents[2] / "scenarios" / "measurements"
    doc = json.loads((data / "checkpointing-cpu-2proc-mlp.json").read_text())
    runs = {r["name"]: r["median_s"] for r in doc["runs"]}
    forward = sum(layer["fwd_time_s"] for layer in doc["layers"] if layer["name"].startswith("fc"))
    for name in ("compute", "ddp_cap25"):
        assert abs(runs[f"{name}_ac"] - runs[name]) < 0.5 * forward, (name, runs[f"{name}_ac"], runs[name])
    scenario = data / "ddp-cpu-2proc-mlp.scenario.yaml"
    sets = ["training.model=checkpointing-cpu-2proc-mlp.model.yaml", "training.bucket_cap_mb=25"]
    ac = [*sets, "training.activation_checkpointing='fc*'"]
    sims = (Simulator.from_source(scenario, sets), Simulator.from_source(scenario, ac),
            Simulator.from_source(scenario, [*ac, "training.checkpoint_early_stop=false"]))  # fmt: skip
    plain, early, whole = (sim.step(["gloo"])[0] for sim in sims)
    assert early.iteration_s == plain.iteration_s and early.compute_s == plain.compute_s
    assert whole.compute_s - plain.compute_s == pytest.approx(forward, rel=1e-3)

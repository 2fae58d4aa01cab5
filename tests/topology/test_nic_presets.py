"""NIC presets of today's clusters (issue 12): speeds, sources, network-plugin environments, and a 2-node run each.

Bits and bytes: NIC speeds are labelled in Gb/s (bits); collsim stores bytes/s, so 400 Gb/s = 400e9 / 8 = 50e9 B/s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from collsim.api import Simulator
from collsim.nccl_env import KNOWN_NCCL_ENV, NcclOptions, check_env_value
from collsim.topology import load_presets, topologies_dir, topology_from_template

_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "2node-h100-ib.yaml"

#: Every NIC preset: (label in Gb/s, port kind of its link preset, RDMA). A preset missing here fails
#: test_every_nic_preset_is_listed, so a new one cannot skip the checks below.
NICS: dict[str, tuple[int, str, bool]] = {
    "connectx-6-hdr": (200, "ib", True),
    "connectx-7-ndr": (400, "ib", True),
    "connectx-6-roce": (200, "roce", True),
    "eth-100g": (100, "eth", False),
    "eth-40g": (40, "eth", False),
    "efa-100g": (100, "roce", True),
    # added for issue 12
    "connectx-5-edr": (100, "ib", True),
    "connectx-8-xdr": (800, "ib", True),
    "connectx-5-roce-100g": (100, "roce", True),
    "connectx-7-roce-400g": (400, "roce", True),
    "efa-v2": (100, "roce", True),
    "efa-v2-p5": (400, "roce", True),  # 4 x 100 Gb/s EFA devices grouped by aws-ofi-nccl
    "efa-v3": (200, "roce", True),
    "efa-v3-p5en": (400, "roce", True),  # 2 x 200 Gb/s
    "eth-10g": (10, "eth", False),
    "eth-25g": (25, "eth", False),
    "gcp-tcpx": (200, "roce", True),  # TCP on the wire; roce is the modelling approximation (see its notes)
    "gcp-tcpxo": (200, "roce", True),
    "aws-ena-100g": (100, "eth", False),  # AWS's 10 Gb/s cap on a TCP flow (flow_bw)
    "aws-ena-100g-no-pg": (100, "eth", False),  # 5 Gb/s a flow outside a cluster placement group
    "efa-v4": (400, "roce", True),  # p6-b200: one device per GPU, not grouped
    "connectx-7-2x200g-roce": (400, "roce", True),  # a dual-port card's 2 x 200 GbE, merged by NCCL from 2.20
}
NEW_NICS = list(NICS)[6:]

#: Link presets that existed before issue 12 without a bandwidth_source (links.yaml's existing entries are not
#: edited here); their `source` names the standard instead.
_LEGACY_LINKS_WITHOUT_BANDWIDTH_SOURCE = {"roce-200g", "eth-100g", "eth-40g"}

#: Environments the cloud vendors document (every variable, values as documented), for the GCP presets.
#: GPUDirect-TCPX: GoogleCloudPlatform/cluster-toolkit a3-highgpu-8g/nccl-tests/run-nccl-tests.sh (commit 7174ca3e).
GCP_TCPX_ENV = {
    "NCCL_NET": "GPUDirectTCPX_v7",
    "NCCL_SOCKET_IFNAME": "enp0s12",
    "NCCL_GPUDIRECTTCPX_CTRL_DEV": "enp0s12",
    "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "enp6s0,enp12s0,enp134s0,enp140s0",
    "NCCL_CROSS_NIC": "0",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "1",
    "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_BUFFSIZE": "4194304",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_PXN_LEVEL": "0",
    "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx-<job>",
    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
    "NCCL_GPUDIRECTTCPX_TX_BINDINGS": "<per NIC cores>",
    "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "<per NIC cores>",
}
#: GPUDirect-TCPXO: google/nccl-plugin-gpudirect-tcpxo tcpxo_scripts/nccl-env-profile.sh (v1.0.17).
GCP_TCPXO_ENV = {
    "NCCL_FASTRAK_IFNAME": "eth1,...,eth8",
    "NCCL_FASTRAK_CTRL_DEV": "eth0",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_CROSS_NIC": "0",
    "NCCL_PROTO": "Simple,LL128",
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_FASTRAK_NUM_FLOWS": "2",
    "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0",
    "NCCL_BUFFSIZE": "8388608",
    "NCCL_FASTRAK_USE_SNAP": "1",
    "NCCL_FASTRAK_USE_LLCM": "1",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0",
    "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
    "NCCL_TUNER_CONFIG_PATH": "<lib dir>/a3plus_tuner_config.textproto",
    "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
}


def _raw(library: str) -> dict[str, Any]:
    """The YAML of ``presets/<library>.yaml`` as written (unit strings, sources)."""
    data = yaml.safe_load((topologies_dir() / "presets" / f"{library}.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_every_nic_preset_is_listed() -> None:
    assert sorted(load_presets().nics) == sorted(NICS)


@pytest.mark.parametrize("name", list(NICS))
def test_speed_matches_label(name: str) -> None:
    gbps, kind, rdma = NICS[name]
    nic = load_presets().nics[name]
    assert _raw("nics")[name]["speed"] == f"{gbps}Gb/s"
    assert nic["speed"] == gbps * 1e9 / 8  # bits to bytes: e.g. 400 Gb/s = 50e9 B/s, 800 Gb/s = 100e9 B/s
    link = load_presets().links[nic["link"]]
    assert (link["kind"], nic["rdma"]) == (kind, rdma)
    # The port preset of a physical NIC runs at the NIC's speed; the grouped EFA presets use one rail's port preset.
    rails = {"efa-v2-p5": 4, "efa-v3-p5en": 2}.get(name, 1)
    assert link["bandwidth"] * rails == nic["speed"]


def test_bit_byte_conversions() -> None:
    nics = load_presets().nics
    assert nics["connectx-8-xdr"]["speed"] == 100e9  # 800 Gb/s / 8
    assert nics["connectx-7-roce-400g"]["speed"] == 50e9  # 400 Gb/s / 8
    assert nics["connectx-7-2x200g-roce"]["speed"] == 50e9  # 2 ports x 200 Gb/s / 8
    assert nics["connectx-7-2x200g-roce"]["nccl_merged_since"] == (2, 20)
    assert nics["eth-25g"]["speed"] == 3.125e9  # 25 Gb/s / 8
    assert nics["eth-10g"]["speed"] == 1.25e9  # 10 Gb/s / 8


@pytest.mark.parametrize("name", list(NICS))
def test_every_number_has_a_source(name: str) -> None:
    nic = _raw("nics")[name]
    for field in ("speed", "latency"):
        assert str(nic.get(f"{field}_source", "")).strip(), f"{name}.{field} has no {field}_source"
    assert str(nic.get("source", "")).strip()
    if "nccl_plugin_env" in nic:
        assert str(nic.get("nccl_plugin_env_source", "")).strip(), f"{name}.nccl_plugin_env has no source"
    link_name = nic["link"]
    link = _raw("links")[link_name]
    for field in ("bandwidth", "efficiency", "latency"):
        if field == "bandwidth" and link_name in _LEGACY_LINKS_WITHOUT_BANDWIDTH_SOURCE:
            continue
        assert str(link.get(f"{field}_source", "")).strip(), f"links.{link_name}.{field} has no {field}_source"


def test_numbers_without_a_datasheet_say_estimate() -> None:
    # a number no document gives must say so: every new link latency is an estimate, and so is every NIC latency
    for name in NEW_NICS:
        nic = _raw("nics")[name]
        assert "estimate" in nic["latency_source"], name
        link = _raw("links")[nic["link"]]
        if not link["efficiency_source"].startswith(("TCP payload", "GCP")):
            assert "estimate" in link["efficiency_source"], nic["link"]


@pytest.mark.parametrize("name", [n for n in NICS if "nccl_plugin_env" in _raw("nics")[n]])
def test_plugin_env_is_valid_nccl(name: str) -> None:
    env = load_presets().nics[name]["nccl_plugin_env"]
    for key, value in env.items():
        assert key in KNOWN_NCCL_ENV, f"{name}: {key} is not a variable collsim models"
        check_env_value(key, value)
    NcclOptions.from_env(env)


def test_efa_generations_protocols() -> None:
    nics = load_presets().nics
    # p4d/p4de: aws-ofi-nccl forces Simple; p5 (EFA reports in-order 128-byte writes), p5en (check skipped with
    # the RDMA protocol) and p6-b200 (its tuner tables pick LL128) keep LL and LL128; all set the 8 MiB buffer of
    # platform-aws.cpp's env tables, and p5en/p6-b200 report 35 us to NCCL's tuner where p4d/p5 report 75.
    assert nics["efa-100g"]["nccl_plugin_env"]["NCCL_PROTO"] == "Simple"
    for name in ("efa-v2", "efa-v2-p5", "efa-v3", "efa-v3-p5en", "efa-v4"):
        env = nics[name]["nccl_plugin_env"]
        assert "NCCL_PROTO" not in env and env["NCCL_BUFFSIZE"] == str(8 * 1024 * 1024), name
    latency = {n: nics[n]["nccl_net_latency"] for n in ("efa-100g", "efa-v2-p5", "efa-v3-p5en", "efa-v4")}
    assert latency == pytest.approx({"efa-100g": 75e-6, "efa-v2-p5": 75e-6, "efa-v3-p5en": 35e-6, "efa-v4": 35e-6})


@pytest.mark.parametrize(("name", "documented"), [("gcp-tcpx", GCP_TCPX_ENV), ("gcp-tcpxo", GCP_TCPXO_ENV)])
def test_gcp_env_modelled_or_noted(name: str, documented: dict[str, str]) -> None:
    raw = _raw("nics")[name]
    env = load_presets().nics[name]["nccl_plugin_env"]
    text = f"{raw['notes']} {raw['nccl_plugin_env_source']}"
    for key, value in documented.items():
        if key in KNOWN_NCCL_ENV:
            assert env.get(key) == value, f"{name}: {key}={value} is modelled and must be in nccl_plugin_env"
        else:
            assert key in text, f"{name}: {key} is not modelled and must be named in the notes"
    assert set(env) <= set(documented)


# ---------------------------------------------------------------------------------------------------------------
# Two nodes with each NIC


def _sim(
    nic: str, transport: str, sizes: str = "1MiB", node: str = "hgx-h100", extra: tuple[str, ...] = ()
) -> Simulator:
    return Simulator.from_source(
        str(_SCENARIO),
        [
            f"cluster.node={node}",
            f"cluster.fabric.nic={nic}",
            f"cluster.fabric.transport={transport}",
            f"workload.sizes={sizes}",
            "backends.gloo.enabled=false",
            *extra,
        ],
    )


@pytest.mark.parametrize("nic", NEW_NICS)
def test_two_nodes_simulate(nic: str) -> None:
    _gbps, _kind, rdma = NICS[nic]
    sim = _sim(nic, "rdma" if rdma else "tcp")
    speed = load_presets().nics[nic]["speed"]
    assert sim.topology.link("n0/nic0", "fabric/rail0").raw_bandwidth == speed
    transports = {h.transport for h in sim.nccl_plan.hops.values() if h.hw == "NET"}
    assert transports == ({"NET/GDR"} if rdma else {"NET/socket"})
    assert sim.nccl_plugin_env == (load_presets().nics[nic]["nccl_plugin_env"] or {})
    (rec,) = sim.run(backends=["nccl"]).records
    assert rec.busbw_gbps > 0 and rec.time_us > 0


def test_faster_ports_are_faster() -> None:
    # 256 MiB allreduce over 2 x 8 rails, rings only so that the network is the bottleneck: EDR < NDR. XDR's 800 Gb/s
    # (100 GB/s) needs PCIe Gen6: on HGX H100's Gen5 x16 GPU-NIC path the PCIe link binds, so XDR = NDR there
    busbw, nic_bw = {}, {}
    for nic in ("connectx-5-edr", "connectx-7-ndr", "connectx-8-xdr"):
        sim = _sim(nic, "rdma", "256MiB", extra=("backends.nccl.env.NCCL_ALGO=Ring",))
        (rec,) = sim.run(backends=["nccl"]).records
        busbw[nic], nic_bw[nic] = rec.busbw_gbps, sim.nccl_plan.nic_bw
    assert busbw["connectx-5-edr"] < busbw["connectx-7-ndr"] == pytest.approx(busbw["connectx-8-xdr"], rel=1e-9)
    pcie5 = load_presets().links["pcie5"]
    assert nic_bw["connectx-8-xdr"] == pytest.approx(pcie5["bandwidth"] * pcie5["efficiency"], rel=1e-9)
    assert nic_bw["connectx-8-xdr"] < load_presets().nics["connectx-8-xdr"]["speed"]


def test_gcp_tcpx_forces_ring_simple() -> None:
    (rec,) = _sim("gcp-tcpx", "rdma", "64MiB").run(backends=["nccl"]).records
    assert (rec.algorithm, rec.protocol.lower()) == ("Ring", "simple")
    # a scenario's own NCCL_ALGO wins over the plugin environment
    sim = _sim("gcp-tcpx", "rdma", "64MiB", extra=("backends.nccl.env.NCCL_ALGO=Tree",))
    assert "NCCL_ALGO" not in sim.nccl_plugin_env
    assert sim.nccl_options.algorithms == frozenset({"Tree"})


# ---------------------------------------------------------------------------------------------------------------
# Node layouts: a NIC shared by two GPUs (GCP A3 High), several NICs per GPU (AWS p5: 4 EFA devices per GPU)


def _template(name: str, nic: str, nics_per_switch: int) -> dict[str, Any]:
    """8 H100 on NVSwitch, 4 PCIe Gen5 switches each with 2 GPUs and ``nics_per_switch`` NICs, 2 sockets."""
    links: list[dict[str, Any]] = [{"a": "gpu[0-7]", "b": "nvswitch", "preset": "nvlink4", "count": 18}]
    for s in range(4):
        first = s * nics_per_switch
        nics = f"nic{first}" if nics_per_switch == 1 else f"nic[{first}-{first + nics_per_switch - 1}]"
        links.append({"a": [f"gpu{2 * s}", f"gpu{2 * s + 1}", nics], "b": f"pcie{s}", "preset": "pcie5"})
    links += [
        {"a": ["pcie0", "pcie1"], "b": "cpu0", "preset": "pcie5"},
        {"a": ["pcie2", "pcie3"], "b": "cpu1", "preset": "pcie5"},
        {"a": "cpu0", "b": "cpu1", "preset": "upi-spr"},
    ]
    return {
        "name": name,
        "devices": [
            {"name": "gpu", "count": 8, "kind": "gpu", "preset": "h100-sxm5-80gb"},
            {
                "name": "nvswitch",
                "kind": "nvswitch",
                "spec": {"physical_switches": 4, "generation": 3, "multicast": True},
            },
            {"name": "pcie", "count": 4, "kind": "pcie_switch", "spec": {"gen": 5}},
            {"name": "nic", "count": 4 * nics_per_switch, "kind": "nic", "preset": nic},
            {"name": "cpu", "count": 2, "kind": "cpu", "preset": "xeon-8480"},
        ],
        "links": links,
    }


def _write(tmp_path: Path, template: dict[str, Any]) -> str:
    path = tmp_path / f"{template['name']}.yaml"
    path.write_text(yaml.safe_dump(template))
    return str(path)


def test_nic_shared_by_two_gpus(tmp_path: Path) -> None:
    template = _template("a3-high-like", "gcp-tcpx", 1)
    topo = topology_from_template(template, nodes=2, fabric={"topology": "rail_optimized"})
    assert len(topo.nics(0)) == 4 and len(topo.devices("switch")) == 4 + 1  # 4 rails, 1 spine
    for g in range(8):
        assert topo.nearest_nic(f"n0/gpu{g}").name == f"n0/nic{g // 2}"
        assert topo.path_class(f"n0/gpu{g}", f"n0/nic{g // 2}") == "PIX"  # within NCCL_NET_GDR_LEVEL=PIX
    sim = _sim("gcp-tcpx", "rdma", "64MiB", node=_write(tmp_path, template))
    assert sim.nccl_plan.nic_count == 4
    assert {h.transport for h in sim.nccl_plan.hops.values() if h.hw == "NET"} == {"NET/GDR"}
    (rec,) = sim.run(backends=["nccl"]).records
    # 4 x 200 Gb/s at GCP's ~150 Gb/s each = 75 GB/s per node per direction: a Ring's busbw stays below it
    assert 0 < rec.busbw_gbps < 4 * 25 * 0.75 * 2


def test_several_nics_per_gpu(tmp_path: Path) -> None:
    template = _template("p5-like", "efa-v2", 8)  # 32 EFA devices, 4 per GPU
    topo = topology_from_template(template, nodes=2, fabric={"topology": "rail_optimized"})
    assert len(topo.nics(1)) == 32
    rails = [d for d in topo.devices("switch") if d.local_name.startswith("rail")]
    assert len(rails) == 32
    assert topo.route("n0/nic31", "n1/nic31")[0].dst == "fabric/rail31"
    # 32 rails x 2 nodes over radix-64 spines: one spine, every rail leaf joined to it with 2 x 100 Gb/s
    assert topo.link("fabric/rail5", "fabric/spine0").raw_bandwidth == 2 * 12.5e9
    sim = _sim("efa-v2", "rdma", "64MiB", node=_write(tmp_path, template))
    assert sim.nccl_plan.nic_count == 32 and sim.nccl_plugin_env == {
        "NCCL_BUFFSIZE": "8388608", "NCCL_NVLS_CHUNKSIZE": "524288", "NCCL_NVLSTREE_MAX_CHUNKSIZE": "524288",
        "NCCL_NET_FORCE_FLUSH": "0", "NCCL_P2P_NET_CHUNKSIZE": "524288",
    }
    (rec,) = sim.run(backends=["nccl"]).records
    assert rec.busbw_gbps > 0


def test_scenario_switch_preset_caps_ports_and_unknown_names_are_errors() -> None:
    # a scenario picks a switch preset as cluster.fabric.switch.preset: Quantum QM8700's 200 Gb/s HDR ports cap the
    # 400 Gb/s NDR NICs of 2node-h100-ib (a port runs at the slower end's rate); an unknown name is one error
    from collsim.scenario import ScenarioError

    ndr = Simulator.from_source("2node-h100-ib", ["cluster.fabric.switch.preset=quantum-2-qm9700"])
    hdr = Simulator.from_source("2node-h100-ib", ["cluster.fabric.switch.preset=quantum-qm8700"])
    assert ndr.topology.link("n0/nic0", "fabric/rail0").raw_bandwidth == 50e9  # 400 Gb/s = 50e9 B/s
    assert hdr.topology.link("n0/nic0", "fabric/rail0").raw_bandwidth == 25e9  # 200 Gb/s = 25e9 B/s
    assert hdr.simulate_one("nccl", 2**30).time_s > ndr.simulate_one("nccl", 2**30).time_s
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source("2node-h100-ib", ["cluster.fabric.switch.preset=nope"])
    assert info.value.field == "cluster.fabric.switch.preset" and "quantum-2-qm9700" in str(info.value)

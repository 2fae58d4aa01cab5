"""format_topo_matrix output."""

from __future__ import annotations

from pathlib import Path

from collsim.topology import Topology, format_topo_matrix, load_topology


def test_dgx_matrix(dgx: Topology) -> None:
    text = format_topo_matrix(dgx)
    lines = text.splitlines()
    assert lines[0] == "dgx-a100: node 0 of 1"
    header = lines[2].split()
    assert header[:2] == ["GPU0", "GPU1"] and header[8:10] == ["NIC0", "NIC1"] and header[-2:] == ["CPU", "Affinity"]
    row0 = next(ln for ln in lines if ln.startswith("GPU0 ")).split()
    assert row0 == ["GPU0", "X"] + ["NV12"] * 7 + ["PIX", "PIX", "PHB", "PHB"] + ["SYS"] * 4 + ["cpu0"]
    row5 = next(ln for ln in lines if ln.startswith("GPU5 ")).split()
    assert row5[-9:] == ["SYS", "SYS", "SYS", "SYS", "PIX", "PIX", "PHB", "PHB", "cpu1"]
    assert "  NV#  = over # bonded NVLinks (directly or through NVSwitch)" in lines
    assert "  NIC3: nic3 (connectx-6-hdr, 200 Gb/s, mlx5_3)" in lines
    table = lines[lines.index("Links (per direction, GB/s = 1e9 bytes/s):") + 1 :]
    assert table[0].split() == ["kind", "links", "per", "link", "GB/s", "total", "GB/s"]
    assert table[1].split() == ["nvlink", "16", "240.00", "3840.00"]
    assert table[2].split() == ["pcie", "40", "24.00", "960.00"]
    assert table[3].split() == ["upi", "2", "16.00", "32.00"]


def test_workstation_matrix() -> None:
    text = format_topo_matrix(load_topology("pcie-workstation", node_params={"sockets": 2, "pcie_switch": False}))
    rows = [ln.split() for ln in text.splitlines() if ln.startswith("GPU")]
    assert rows[0] == ["GPU0", "X", "SYS", "cpu0"]
    assert rows[1] == ["GPU1", "SYS", "X", "cpu1"]
    assert "NIC Legend:" not in text


def test_cpu_host_and_other_node() -> None:
    topo = load_topology(
        "cpu-host",
        nodes=2,
        fabric={"topology": "single_switch", "transport": "tcp"},
        node_params={"sockets": 2, "processes": 4},
    )
    text = format_topo_matrix(topo, node=1)
    assert text.startswith("cpu-host: node 1 of 2\n")
    assert "no GPUs; ranks are 4 process(es) per node on cpu0, cpu1" in text
    assert ["cpu1", "SYS"] in [ln.split() for ln in text.splitlines()]
    assert "  NIC0: nic0 (eth-100g, 100 Gb/s)" in text
    eth = next(ln.split() for ln in text.splitlines() if ln.strip().startswith("eth"))
    assert eth == ["eth", "4", "11.75", "47.00"]  # 12.5e9 B/s * 0.94 per direction, 4 directed links
    assert "no devices on node 5" in format_topo_matrix(topo, node=5)
    aws = load_topology("cpu-host", nodes=2, fabric={"topology": "single_switch", "transport": "tcp"},
                        node_params={"nic": "aws-ena-100g"})  # fmt: skip
    assert "  NIC0: nic0 (aws-ena-100g, 100 Gb/s, 10 Gb/s a TCP flow (flow_bw))" in format_topo_matrix(aws)


def test_new_node_matrices() -> None:
    # issue 12: the DGX-1's cube-mesh shows NV1/NV2/SYS as nvidia-smi does; a GB200 NVL72 tray's NICs are NET to
    # the GPUs of other trays (other hosts)
    lines = format_topo_matrix(load_topology("dgx1-v100")).splitlines()
    row3 = next(ln for ln in lines if ln.startswith("GPU3 ")).split()
    assert row3 == ["GPU3", "NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1", "PHB", "PIX", "SYS", "SYS", "cpu0"]
    assert "  NIC2: nic2 (connectx-5-edr, 100 Gb/s, mlx5_2)" in lines
    nvl = format_topo_matrix(load_topology("gb200-nvl72", node_params={"gpus": 36, "nics_per_gpu": 1}))
    row = next(ln for ln in nvl.splitlines() if ln.startswith("GPU35 ")).split()
    assert row[1:37] == ["NV18"] * 35 + ["X"]
    assert row[37:] == ["NET"] * 32 + ["SYS", "SYS", "PHB", "PHB", "cpu17"]


def test_template_parameters_say_which_are_defaults() -> None:
    """A template's parameters are listed with their values, each marked set or default (issue 16: cpu-host's 2
    processes per node were never shown as a default); a template without parameters lists none."""
    topo = load_topology("cpu-host", node_params={"sockets": 2})
    lines = format_topo_matrix(topo, given={"sockets": 2}).splitlines()
    title = "Template parameters (cluster.node_params; 'default' = the template's, not set by the scenario):"
    head = lines.index(title)
    params = {ln.split()[0]: (ln.split()[2], ln.split()[-1]) for ln in lines[head + 1 : head + 6]}
    assert params == {
        "sockets": ("2", "(set)"),
        "cpu": ("generic-x86", "(default)"),
        "processes": ("2", "(default)"),
        "nic": ("eth-100g", "(default)"),
        "pcie_gen": ("3", "(default)"),
    }
    assert "no GPUs; ranks are 2 process(es) per node on cpu0, cpu1" in lines
    assert "Template parameters" not in format_topo_matrix(load_topology("dgx-a100"))
    text = format_topo_matrix(load_topology("pcie-workstation", node_params={"p2p": False}), given={"p2p": False})
    assert "  p2p             = false        (set)" in text and "nic             = null" in text


def test_cloud_instance_and_network_plugin_are_shown() -> None:
    """aws-p5 names its instance type (what AWS's plugin reads) and each EFA NIC its NCCL network plugin and
    per-message cost."""
    topo = load_topology("aws-p5", nodes=2, fabric={"topology": "single_switch", "transport": "rdma"})
    text = format_topo_matrix(topo)
    assert text.startswith("aws-p5: node 0 of 2 (p5.48xlarge)\n")
    assert "  NIC0: nic0 (efa-v2-p5, 400 Gb/s, NCCL network plugin aws-ofi-nccl, 3.55 us a message" in text
    assert "network plugin" not in format_topo_matrix(load_topology("hgx-h100"))


def test_fabric_layout_fat_tree() -> None:
    """``collsim topo`` on several nodes shows the fabric: a leaf's NIC ports and its capacity down and up (the
    oversubscription as built), the spines, where node 0's NICs plug in, and a route through the spines. 4 x HGX
    H100 (8 NDR NICs at 400 Gb/s x 0.96 = 48 GB/s), radix 16: 8 NICs a leaf, 4 leaves, ceil(32 / 16) = 2 spines."""
    topo = load_topology(
        "hgx-h100", nodes=4, fabric={"topology": "fat_tree", "switch": {"radix": 16}, "oversubscription": 2}
    )
    text = format_topo_matrix(topo)
    lines = text[text.index("Fabric (") :].splitlines()
    assert lines[0] == (
        "Fabric (cluster.fabric): fat_tree, rdma over ib (NVIDIA ConnectX-7 NDR InfiniBand), GPUDirect RDMA on; 4 "
        "nodes x 8 NICs = 32 NIC ports"
    )
    assert lines[1] == "  switch radix 16; a hop's latency is its link preset's"
    rows = [ln.split() for ln in lines[3:5]]
    assert rows[0] == ["leaf", "4", "8", "384.00", "192.00", "2:1", "leaf0..leaf3"]  # 8 x 48; 384 / 2
    assert rows[1] == ["spine", "2", "-", "384.00", "-", "-", "spine0,", "spine1"]  # 4 leaves x 192 / 2 spines
    assert lines[5] == "  node 0's NICs: NIC0..NIC7 on leaf0"
    # node 1's NICs fill leaf1 (node-major): the route crosses a spine, 4 links of NDR's 0.2 us
    assert lines[7] == (
        "    n0/nic0 -> n1/nic0: leaf0 -> spine0, spine1 (2 equal-cost) -> leaf1; 4 links, 0.80 us one way"
    )
    assert "Fabric (" not in format_topo_matrix(load_topology("hgx-h100"))


def test_fabric_layout_rails_and_perturbations(tmp_path: Path) -> None:
    """Rails: NIC i on rail i, a same-rail route of one switch and a cross-rail one through the spine. A NIC taken
    down and a spine at half rate show in the counts and in a leaf row of its own."""
    from collsim.api import Simulator

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ncluster: {node: hgx-h100, nodes: 2, fabric: {topology: rail_optimized}}\n"
        "workload: {collective: allreduce, sizes: 1GiB}\nbackends: {nccl: {enabled: true}}\n"
        "perturb: {links: [{device: fabric/spine0, scale: 0.5}], down: [{device: n0/nic3}]}\n"
    )
    text = format_topo_matrix(Simulator.from_source(str(path)).topology)
    lines = text[text.index("Fabric (") :].splitlines()
    assert lines[0].endswith("; 2 nodes x 8 NICs, 15 NIC ports up (perturb.down)")
    rows = [ln.split() for ln in lines[3:6]]
    # a rail leaf: 2 NICs (2 x 48 GB/s) and its uplink to the one spine, 2 nodes' worth (96), at half rate
    assert rows[0] == ["leaf", "7", "2", "96.00", "48.00", "2:1", "rail0..rail2,", "rail4..rail7"]
    assert rows[1] == ["leaf", "1", "1", "48.00", "48.00", "1:1", "rail3"]  # n0/nic3 down
    assert rows[2] == ["spine", "1", "-", "384.00", "-", "-", "spine0"]  # 8 x 48
    assert lines[6] == "  node 0's NICs: NIC i on rail i (NIC0..NIC2, NIC4..NIC7)"
    assert lines[-2] == "    n0/nic0 -> n1/nic0: rail0; 2 links, 0.40 us one way"
    assert lines[-1] == "    n0/nic0 -> n1/nic1: rail0 -> spine0 -> rail1; 4 links, 0.80 us one way"


def test_the_copy_engines_rate_is_shown_beside_nccls() -> None:
    """The links table gives NCCL's figure (48 GB/s for Gen5 x16); Gloo's staging copies run at the measured DMA
    rate (pcie5 dma_efficiency 0.8727 x 63.015 = 54.99 GB/s), which the table now says."""
    text = format_topo_matrix(load_topology("hgx-h100"))
    assert ("  (a copy engine's GPU-host copies, as Gloo's staging makes, run at the measured dma_efficiency: pcie "
            "54.99 GB/s a link)") in text.splitlines()  # fmt: skip
    assert "dma_efficiency" not in format_topo_matrix(load_topology("dgx-a100"))  # Gen4: none measured

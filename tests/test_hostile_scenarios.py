"""Hostile and careless scenario files: every one is a clean exit 2 from ``hybridsim validate`` (and ``run``), fast,
with file:line and the field named, and nothing written. The files are generated here; the memory bombs run in a
subprocess under a timeout so that a regression cannot take the test run down with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybridsim.cli import main

REPO = Path(__file__).resolve().parents[1]

BASE = """\
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - name: a
    ranks: 4
    iterations: 2
    workload: {kind: milc, dimension_sizes: [2, 2], msg_size: 4096}
"""
MSG = "msg_size: 4096"


def laughs(section: str, levels: int = 9) -> str:
    """The "billion laughs": 10 aliases per level, 10^levels nodes once expanded, a few hundred bytes of YAML."""
    out = f"{section}:\n    x0: &a0 [{', '.join(['lol'] * 10)}]\n"
    for i in range(1, levels):
        out += f"    x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n"
    return out


PLUGIN_CTOR = ("from controllers import Policy\nclass P(Policy):\n    def __init__(self):\n"
               "        raise RuntimeError('no')\n    def decide(self, view):\n        return None\n")
ITER = "    iterations: 2\n"


def topo(extra: str) -> str:
    """BASE with ``extra`` added to its topology line (line 1)."""
    return BASE.replace("2}\n", f"2, {extra}}}\n", 1)
PLUGIN_IMPORT = "raise RuntimeError('broken at import')\n"
#: the five-line LAMMPS scenario of issue 21 (``params``: the workload's fields)
LAMMPS = """\
topology: {{groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}}
jobs:
  - name: l
    ranks: 8
    workload: {{kind: lammps, {params}}}
    iterations: 1
"""
#: a job stream whose second job gets ``job``'s fields
STREAM = """\
topology: {{groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}}
scheduler: {{queue: fcfs}}
jobs:
  - {{name: a, ranks: 4, iterations: 2, workload: {{kind: allreduce}}}}
  - {{name: b, ranks: 4, iterations: 2, workload: {{kind: allreduce}},
     {job}}}
"""

#: id -> (files (s.yaml is the scenario), fragments the error must contain, memory/time bomb on main)
CASES: dict[str, tuple[dict, tuple[str, ...], bool]] = {
    # -- unbounded cost
    "laughs_controller_params": ({"s.yaml": BASE + "controller:\n  policy: periodic\n" + laughs("  params")},
                                 ("s.yaml:", "controller.params.x", "yaml_nodes"), True),
    "laughs_surrogate_config": ({"s.yaml": BASE + "surrogate:\n  model: ridge\n" + laughs("  config")},
                                ("s.yaml:", "surrogate.config.x", "yaml_nodes"), True),
    "msg_size_1e15": ({"s.yaml": BASE.replace(MSG, "msg_size: 1000000000000000")},
                      ("s.yaml:6:", "jobs.0.workload.msg_size", "max_packets_per_message"), True),
    "msg_size_1e15_string": ({"s.yaml": BASE.replace(MSG, "msg_size: 1e15")},  # YAML 1.1 reads 1e15 as a string
                            ("s.yaml:6:", "msg_size", "valid integer"), True),
    "iterations_1e12": ({"s.yaml": BASE.replace("iterations: 2", "iterations: 1000000000000")},
                        ("s.yaml:5:", "jobs.0.iterations", "max_rank_iterations"), True),
    "sampling_interval_1": ({"s.yaml": BASE + "sampling: {interval: 1}\n"},
                            ("s.yaml:7:", "sampling.interval", "greater than or equal to 1000"), True),
    "bandwidth_1e-300": ({"s.yaml": topo("bandwidth: {local: 1.0e-300}")},
                         ("s.yaml:1:", "topology.bandwidth.local", "greater than or equal to 0.001"), True),
    "packet_size_1": ({"s.yaml": topo("packet_size: 1")},
                      ("s.yaml:1:", "topology.packet_size", "greater than or equal to 64"), True),
    "router_delay_inf": ({"s.yaml": topo("router_delay: .inf")},
                         ("s.yaml:1:", "topology.router_delay", "not a finite number"), True),
    "compute_delay_1e300": ({"s.yaml": BASE.replace(ITER, ITER + "    compute: {delay: 1.0e300}\n")},
                            ("s.yaml:6:", "jobs.0.compute.delay", "less than or equal to"), True),
    "compute_delay_max_x_iterations": ({"s.yaml": BASE.replace(ITER, "    iterations: 10\n"
                                                                     "    compute: {delay: 1.0e12}\n")},
                                       ("s.yaml:3:", "jobs.0: at least", "sampling.interval", "max_samples"), True),
    "sample_windows_x_ports": ({"s.yaml": BASE.replace(ITER, "    iterations: 1000000\n"
                                                       "    compute: {delay: 1ms}\n") + "sampling: {interval: 10us}\n"},
                               ("s.yaml:8:", "sampling.interval", "max_samples"), False),
    "background_interval_1e-300": ({"s.yaml": BASE.replace(ITER, "").replace(
        "kind: milc, dimension_sizes: [2, 2], msg_size: 4096", "kind: uniform_random, interval: 1.0e-300")
        + "backend: {embedded: {end_time: 1000}}\n"},
                                   ("s.yaml:5:", "workload.uniform_random.interval", "greater than or equal to 1"),
                                   True),
    "credit_delay_nan": ({"s.yaml": topo("credit_delay: .nan")},
                         ("s.yaml:1:", "topology.credit_delay", "not a finite number"), False),
    "cpu_freq_1e-300": ({"s.yaml": BASE.replace(MSG, "msg_size: 4096, cpu_freq: 1.0e-300")},
                        ("s.yaml:6:", "cpu_freq", "greater than or equal to"), True),
    "end_time_inf_string": ({"s.yaml": BASE + "backend: {embedded: {end_time: inf}}\n"},
                            ("s.yaml:7:", "backend.embedded.end_time", "expected a time"), False),
    "bandwidth_inf_string": ({"s.yaml": topo("bandwidth: {local: 'inf'}")},
                             ("s.yaml:1:", "topology.bandwidth.local", "finite"), False),
    # -- loops and allocations driven by workload and stream parameters (issue 21): refused from the parameters alone
    "lammps_replicas_1e6": ({"s.yaml": LAMMPS.format(params="num_x_replicas: 1000000")},
                            ("s.yaml:5:", "jobs.0.workload.num_x_replicas", "packets of 4096 B per message",
                             "max_packets_per_message"), True),
    "lammps_replicas_1e4_cubed": ({"s.yaml": LAMMPS.format(params="num_x_replicas: 10000, num_y_replicas: 10000, "
                                                                  "num_z_replicas: 10000")},
                                  ("s.yaml:5:", "num_x_replicas", "max_packets_per_message", "limits.max_packets",
                                   "max_samples"), True),
    "milc_40_dimensions_distance_40": ({"s.yaml": BASE.replace("ranks: 4", "ranks: 1").replace(
        "dimension_sizes: [2, 2]", "dimension_sizes: [" + ", ".join(["1"] * 40) + "], max_dimension_distance: 40")},
                                       ("s.yaml:6:", "jobs.0.workload", "MPI ops", "limits.max_ops"), True),
    "milc_allreduce_count_1e12": ({"s.yaml": BASE.replace(MSG, MSG + ", allreduce_count: 1000000000000")},
                                  ("s.yaml:6:", "jobs.0.workload", "limits.max_ops"), True),
    "milc_allreduce_size_1e15": ({"s.yaml": BASE.replace(MSG, MSG + ", allreduce_size: 1000000000000000")},
                                 ("s.yaml:6:", "jobs.0.workload.allreduce_size", "max_packets_per_message"), True),
    "allreduce_count_1e12": ({"s.yaml": BASE.replace("kind: milc, dimension_sizes: [2, 2], msg_size: 4096",
                                                     "kind: allreduce, count: 1000000000000")},
                             ("s.yaml:6:", "jobs.0.workload", "limits.max_ops"), True),
    "nn_distance_in_20_dimensions": ({"s.yaml": BASE.replace("ranks: 4", "ranks: 1").replace(
        "kind: milc, dimension_sizes: [2, 2]", "kind: nn, dimension_sizes: [" + ", ".join(["1"] * 20)
        + "], max_dimension_distance: 20")}, ("s.yaml:6:", "jobs.0.workload", "limits.max_ops"), True),
    "stream_arrival_1e294s": ({"s.yaml": STREAM.format(job="arrival: 1e294s")},
                              ("s.yaml:6:", "jobs.1.arrival", "less than or equal to 9007199254740992"), True),
    "stream_walltime_1e294s": ({"s.yaml": STREAM.format(job="walltime: 1e294s")},
                               ("s.yaml:6:", "jobs.1.walltime", "less than or equal to"), False),
    "stream_arrival_25h_samples": ({"s.yaml": STREAM.format(job="arrival: 90000s")},
                                   ("s.yaml:", "sampling.interval", "arrival", "max_samples"), True),
    "end_time_1e300": ({"s.yaml": BASE + "backend: {embedded: {end_time: 1.0e300}}\n"},
                       ("s.yaml:7:", "backend.embedded.end_time", "less than or equal to"), False),
    "surrogate_lookback_1e15": ({"s.yaml": BASE + "surrogate: {model: ridge, lookback: 1000000000000000}\n"},
                               ("s.yaml:7:", "surrogate.lookback", "longer than the longest job (2 iterations)"),
                               False),
    "lammps_997_ranks_cannot_decompose": ({"s.yaml": "jobs:\n  - name: l\n    ranks: 997\n    iterations: 1\n"
                                                     "    workload: {kind: lammps}\n"},
                                          ("s.yaml:3:", "jobs.0.ranks", "process grid [1, 997, 1]"), False),
    "codes_sample_count_1e12": ({"s.yaml": BASE + "backend: {kind: codes, codes: {sample_count: 1000000000000}}\n"},
                                ("s.yaml:7:", "backend.codes.sample_count", "max_samples"), False),
    # -- tracebacks on main
    "deep_yaml_100k": ({"s.yaml": BASE + "description: " + "[" * 100_000 + "]" * 100_000 + "\n"},
                       ("s.yaml:7:", "deeper than 64", "yaml_depth"), True),
    "deep_yaml_mapping": ({"s.yaml": BASE + "controller: {params: " + "{a: " * 5000 + "1" + "}" * 5001 + "\n"},
                          ("s.yaml:7:", "yaml_depth"), True),
    "topology_1e9_nodes": ({"s.yaml": BASE.replace("groups: 9, routers_per_group: 4, terminals_per_router: 2, "
                                                   "global_channels_per_router: 2",
                                                   "groups: 1000, routers_per_group: 1000, terminals_per_router: 1000, "
                                                   "global_channels_per_router: 1")},
                           ("s.yaml:1:", "topology", "max_nodes"), True),
    "topology_huge_radix": ({"s.yaml": BASE.replace("global_channels_per_router: 2",
                                                    "global_channels_per_router: 100000000")},
                            ("s.yaml:1:", "topology", "max_ports"), True),
    "alloc_non_utf8": ({"s.yaml": BASE + "placement: {policy: file, file: alloc.txt}\n",
                        "alloc.txt": b"0 1 2 \xff\xfe 3\n"},
                       ("s.yaml:7:", "placement", "alloc.txt:1:7", "0xff"), False),
    "alloc_huge_id": ({"s.yaml": BASE + "placement: {policy: file, file: alloc.txt}\n",
                       "alloc.txt": "0 1 2 " + "9" * 5000 + "\n"},
                      ("s.yaml:7:", "alloc.txt:1", "not an integer"), False),
    "huge_integer_literal": ({"s.yaml": BASE + "seed: " + "9" * 5000 + "\n"},
                             ("s.yaml:7:", "seed", "64 bits"), False),
    "huge_integer_groups": ({"s.yaml": BASE.replace("groups: 9", "groups: 1000000000000000000000000000000")},
                            ("s.yaml:1:", "topology.groups", "64 bits"), False),
    "recursive_alias": ({"s.yaml": BASE + "controller:\n  params:\n    x: &a [*a]\n"},
                        ("s.yaml:9:", "controller.params.x", "recursive"), True),
    "non_utf8_scenario": ({"s.yaml": BASE.encode() + b"description: caf\xe9\n"}, ("s.yaml:7:17", "not UTF-8"), False),
    "binary_garbage": ({"s.yaml": bytes(range(256)) * 16}, ("s.yaml:2:", "not UTF-8 text (byte 0x80)"), False),
    "nul_byte": ({"s.yaml": BASE + "name: \x00\n"}, ("s.yaml:7:7", "#x0000"), False),
    "empty_file": ({"s.yaml": ""}, ("s.yaml:1:1", "empty scenario"), False),
    "list_at_top": ({"s.yaml": "- jobs\n- topology\n"}, ("s.yaml:1:1", "expected a mapping", "list"), False),
    "two_documents": ({"s.yaml": BASE + "---\n" + BASE}, ("s.yaml:7:", "single document"), False),
    "python_tag": ({"s.yaml": BASE + "name: !!python/object/apply:os.system ['echo pwned']\n"},
                   ("s.yaml:7:", "python/object/apply"), False),
    "too_many_bytes": ({"s.yaml": BASE + "description: '" + "x" * (5 * 2**20) + "'\n"}, ("s.yaml", "yaml_bytes"),
                       False),
    # -- late or silent
    "unknown_policy": ({"s.yaml": BASE + "controller: {policy: nosuch}\n"},
                       ("s.yaml:7:", "controller.policy", "unknown policy 'nosuch'"), False),
    "policy_ft_0": ({"s.yaml": BASE + "controller: {policy: periodic, params: {ft: 0}}\n"},
                    ("s.yaml:7:", "controller.params", "ft must be an integer >= 2"), False),
    "policy_ft_bool": ({"s.yaml": BASE + "controller: {policy: periodic, params: {ft: true}}\n"},
                       ("s.yaml:7:", "controller.params", "ft must be an integer"), False),
    "unknown_policy_param": ({"s.yaml": BASE + "controller: {policy: periodic, params: {fft: 8}}\n"},
                             ("s.yaml:7:", "controller.params.fft", "did you mean 'ft'"), False),
    "unknown_model": ({"s.yaml": BASE + "surrogate: {model: nosuch}\n"},
                      ("s.yaml:7:", "surrogate.model", "unknown surrogate model 'nosuch'"), False),
    "model_config_unknown_key": ({"s.yaml": BASE + "surrogate: {model: ridge, config: {kk: 3}}\n"},
                                 ("s.yaml:7:", "surrogate.config", "unknown config key 'kk'"), False),
    # -- model options and policy parameters over their bounds (issue 21): refused by validate, nothing built
    "lstm_hidden_1e8": ({"s.yaml": BASE + "surrogate: {model: lstm, config: {hidden: 100000000}}\n"},
                        ("s.yaml:7:43", "surrogate.config.hidden", "hidden=100000000", "at most 4096"), False),
    "lstm_epochs_1e9": ({"s.yaml": BASE + "surrogate: {model: lstm, config: {epochs: 1000000000}}\n"},
                        ("s.yaml:7:43", "surrogate.config.epochs", "at most 100000"), False),
    "dcrnn_spec_K_1000": ({"s.yaml": BASE + "surrogate: {model: 'dcrnn:K=1000'}\n"},
                          ("s.yaml:7:", "surrogate.model", "K=1000", "at most 64"), False),
    "smart_ff_1e300": ({"s.yaml": BASE + "surrogate: {model: smart, config: {tf_ff: 1e300}}\n"},
                       ("s.yaml:7:", "surrogate.config.tf_ff", "at most 4096"), False),
    "ridge_spec_k_2e400": ({"s.yaml": BASE + "surrogate: {model: 'ridge:k=" + "2" * 400 + "'}\n"},
                           ("s.yaml:7:", "surrogate.model", "option k=222", "at most 4096"), False),
    "policy_warmup_1e12": ({"s.yaml": BASE + "controller: {policy: periodic, params: {warmup: 1000000000000}}\n"},
                           ("s.yaml:7:", "controller.params", "warmup must be an integer", "<= 2147483647"), False),
    "policy_threshold_list": ({"s.yaml": BASE + "controller: {policy: error-adaptive, params: {threshold: [1]}}\n"},
                             ("s.yaml:7:", "controller.params", "threshold must be a finite number"), False),
    "model_config_bad_value": ({"s.yaml": BASE + "surrogate: {model: lstm, config: {hidden: many}}\n"},
                               ("s.yaml:7:", "surrogate.config", "hidden", "many"), False),
    "remote_model_bad_address": ({"s.yaml": BASE + "surrogate: {model: remote, config: {address: nohost}}\n"},
                                 ("s.yaml:7:", "surrogate.config", "HOST:PORT"), False),
    "checkpoint_folder_missing": ({"s.yaml": BASE + "surrogate: {model: ./no/such/}\n"},
                                  ("s.yaml:7:", "surrogate.model", "no checkpoint folder"), False),
    "plugin_constructor_raises": ({"s.yaml": BASE + "controller: {policy: 'hostile_ctor:P'}\n",
                                   "hostile_ctor.py": PLUGIN_CTOR},
                                  ("s.yaml:7:", "controller.policy", "RuntimeError", "no"), False),
    "plugin_import_raises": ({"s.yaml": BASE + "controller: {policy: 'hostile_import:P'}\n",
                              "hostile_import.py": PLUGIN_IMPORT},
                             ("s.yaml:7:", "controller.policy", "broken at import"), False),
    "duplicate_key": ({"s.yaml": BASE.replace(ITER, ITER + "    ranks: 8\n")},
                      ("s.yaml:6:5", "jobs.0.ranks", "duplicate key 'ranks'", "first at line 4"), False),
    "duplicate_section": ({"s.yaml": BASE + "topology: {groups: 2}\n"},
                          ("s.yaml:7:1", "duplicate key 'topology'", "first at line 1"), False),
    "groups_true": ({"s.yaml": BASE.replace("groups: 9", "groups: true")},
                    ("s.yaml:1:", "topology.groups", "valid integer"), False),
    "iterations_yes": ({"s.yaml": BASE.replace("iterations: 2", "iterations: yes")},
                       ("s.yaml:5:", "jobs.0.iterations", "valid integer"), False),
    "ranks_float": ({"s.yaml": BASE.replace("ranks: 4", "ranks: 4.0")}, ("s.yaml:4:", "jobs.0.ranks", "valid integer"),
                    False),
    "ports_as_number": ({"s.yaml": BASE + "sampling: {ports: 1}\n"}, ("s.yaml:7:", "sampling.ports", "valid boolean"),
                        False),
    # -- round 4 (issue 35): an offered load above what the links carry, and what run refused late
    "background_offers_more_than_its_link": (
        {"s.yaml": BASE + "  - {name: bg, ranks: 16, workload: {kind: uniform_random, msg_size: 100000, interval: 1}}\n"},
        ("s.yaml:7:", "jobs.1.workload.interval", "100000 B every 1 ns per rank = 1e+05 B/ns", "5.25 GiB/s (5.637 B/ns)",
         "limits.max_offered_load = 1", "interval >= 1.774e+04 ns"), True),
    "background_just_over_its_link": (  # 4096 B / 700 ns = 5.85 B/ns against 5.25 GiB/s = 5.637 B/ns
        {"s.yaml": BASE + "  - {name: bg, ranks: 16, workload: {kind: uniform_random, interval: 700}}\n"},
        ("s.yaml:7:", "jobs.1.workload.interval", "5.851 B/ns", "1.04 x"), False),
    "background_over_a_slow_terminal_link": (
        {"s.yaml": topo("bandwidth: {terminal: 0.5}") + "  - {name: bg, ranks: 2, workload: {kind: uniform_random}}\n"},
        ("s.yaml:7:", "jobs.1.workload.interval", "0.5 GiB/s", "1.91 x"), False),
    "one_message_over_max_queued_packets": ({"s.yaml": BASE.replace(MSG, "msg_size: 40960")
                                             + "limits: {max_queued_packets: 5}\n"},
                                            ("s.yaml:6:", "jobs.0.workload.msg_size", "10 packets",
                                             "limits.max_queued_packets = 5"), False),
    "vc_buffer_2e53": ({"s.yaml": topo("vc_buffer: {local: 9007199254740992}")},
                       ("s.yaml:1:", "topology", "VC buffer of more than 2147483647 packets", "local"), True),
    "vc_buffer_terminal_2e62": ({"s.yaml": topo("vc_buffer: {terminal: 4611686018427387904}")},
                                ("s.yaml:1:", "topology", "VC buffer of more than 2147483647 packets", "terminal"),
                                False),
    "packet_size_2e31": ({"s.yaml": topo("packet_size: 2147483648")},
                         ("s.yaml:1:", "topology.packet_size", "less than or equal to 1073741824"), False),
    "port_vcs_beyond_int32": ({"s.yaml": topo("num_vcs: 16").replace("groups: 9", "groups: 2049").replace(
        "routers_per_group: 4", "routers_per_group: 256").replace("global_channels_per_router: 2",
                                                                   "global_channels_per_router: 16")
        + "limits: {max_nodes: 100000000, max_ports: 1000000000}\n"},
                              ("s.yaml:1:", "topology", "port VCs", "at most 2147483647"), True),
    "only_background_without_an_end": ({"s.yaml": BASE.replace(ITER, "").replace(
        "kind: milc, dimension_sizes: [2, 2], msg_size: 4096", "kind: uniform_random")},
                                       ("s.yaml:3:", "jobs", "only background jobs", "end_time"), False),
    "stream_on_the_remote_backend": ({"s.yaml": STREAM.format(job="arrival: 10")
                                      + "backend: {remote: 'localhost:1'}\n"},
                                     ("s.yaml:2:", "scheduler", "remote engine protocol"), False),
    "custom_tag_2e63": ({"s.yaml": BASE.replace("kind: milc, dimension_sizes: [2, 2], msg_size: 4096",
                                                "kind: custom, function: 'hostile_tag:two'"),
                         "hostile_tag.py": "from hybridsim.workloads import Program\n"
                                           "def two(rank, iteration, n_ranks):\n"
                                           "    p = Program(rank, n_ranks)\n"
                                           "    p.sendrecv((rank + 1) % n_ranks, 64, (rank - 1) % n_ranks, 2**63)\n"
                                           "    return p.ops\n"},
                        ("s.yaml:6:", "jobs.0.workload.function", "tag=9223372036854775808",
                         "tag must be an int in -2^63..2^63 - 1"), False),
    "custom_compute_inf": ({"s.yaml": BASE.replace("kind: milc, dimension_sizes: [2, 2], msg_size: 4096",
                                                   "kind: custom, function: 'hostile_inf:one'"),
                            "hostile_inf.py": "from hybridsim.workloads import compute\n"
                                              "def one(rank, iteration, n_ranks):\n"
                                              "    return [compute(float('inf'))]\n"},
                           ("s.yaml:6:", "jobs.0.workload.function", "compute time must be a finite number"), False),
    "connections_groups_not_linked": ({"s.yaml": topo("connections: {intra: intra, inter: inter}"),
                                       "intra": "<intra>", "inter": "<inter without 0-1>"},
                                      ("s.yaml:1:", "topology.connections", "1 pair(s) of groups have no global link",
                                       "(0-1)"), False),
    "connections_inter_larger_than_the_topology": ({"s.yaml": topo("connections: {intra: intra, inter: inter}"),
                                                    "intra": "<intra>", "inter": b"\0" * 8 * 1000},
                                                   ("s.yaml:1:", "topology.connections", "inter-group file",
                                                    "larger than 576 bytes"), False),
}


def _connection_files() -> dict[str, bytes]:
    """CODES connection files of BASE's 72-node Dragonfly: ``<intra>``, ``<inter>``, and ``<inter without 0-1>`` (the
    one link between groups 0 and 1 dropped, both directions: every router keeps its others)."""
    import numpy as np

    from hybridsim_common.topology import Dragonfly, DragonflyShape

    d = Dragonfly(DragonflyShape(9, 4, 2, 2))
    intra = np.asarray([(i, j, 0) for i in range(d.a) for j in d.local_order[i]], "<i4")
    links = [(r, t) for r in range(d.n_routers) for t in d.global_targets[r]]
    cut = [(r, t) for r, t in links if {r // d.a, t // d.a} != {0, 1}]
    assert len(links) - len(cut) == 2
    return {"<intra>": intra.tobytes(), "<inter>": np.asarray(links, "<i4").tobytes(),
            "<inter without 0-1>": np.asarray(cut, "<i4").tobytes()}


#: cases whose plug-in module lies next to the scenario: it is imported only with --plugin-path (hybridsim_common.plugins)
PLUGIN_CASES = ("plugin_constructor_raises", "plugin_import_raises", "custom_tag_2e63", "custom_compute_inf")


@pytest.fixture(autouse=True)
def _restore_plugin_paths(monkeypatch):
    """--plugin-path given in-process changes sys.path and the allowed folders: undo it after each test."""
    from hybridsim_common import plugins

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(plugins, "_ALLOWED", list(plugins._ALLOWED))


def plugin_args(tmp_path: Path, name: str) -> list[str]:
    return ["--plugin-path", str(tmp_path)] if name in PLUGIN_CASES else []


def write_case(tmp_path: Path, name: str) -> Path:
    files = CASES[name][0]
    for fname, content in files.items():
        p = tmp_path / fname
        if isinstance(content, str) and content.startswith("<") and content.endswith(">"):
            content = _connection_files()[content]
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return tmp_path / "s.yaml"


def check_message(text: str, name: str, path: Path) -> None:
    fragments = CASES[name][1]
    for frag in fragments:
        frag = frag.replace("s.yaml", str(path))
        assert frag in text, f"{name}: {frag!r} not in:\n{text}"
    assert "Traceback" not in text


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_rejects(tmp_path, capsys, monkeypatch, name):
    path = write_case(tmp_path, name)
    monkeypatch.chdir(tmp_path)
    if CASES[name][2]:  # bounded in a subprocess: on main these exhaust memory or never finish
        r = subprocess.run([sys.executable, "-m", "hybridsim", "validate", str(path)], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        rc, err = r.returncode, r.stderr
    else:
        t0 = time.perf_counter()
        rc = main(["validate", str(path), *plugin_args(tmp_path, name)])
        assert time.perf_counter() - t0 < 30
        err = capsys.readouterr().err
    assert rc == 2, err
    check_message(err, name, path)


@pytest.mark.parametrize("name", ["unknown_policy", "policy_ft_0", "unknown_model", "model_config_unknown_key",
                                  "plugin_constructor_raises", "duplicate_key", "laughs_controller_params",
                                  "iterations_1e12", "topology_1e9_nodes", "alloc_non_utf8", "msg_size_1e15",
                                  "lammps_replicas_1e6", "milc_allreduce_count_1e12", "stream_arrival_1e294s",
                                  "lstm_hidden_1e8", "policy_warmup_1e12", "background_offers_more_than_its_link",
                                  "vc_buffer_2e53", "only_background_without_an_end", "stream_on_the_remote_backend",
                                  "custom_tag_2e63", "connections_groups_not_linked"])
def test_run_writes_nothing(tmp_path, capsys, monkeypatch, name):
    path = write_case(tmp_path, name)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["run", str(path), "--mode", "hybrid", "--no-progress", *plugin_args(tmp_path, name)])
    err = capsys.readouterr().err
    assert rc == 2, err
    check_message(err, name, path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == before


def test_run_hybrid_subprocess_writes_nothing(tmp_path):
    path = write_case(tmp_path, "policy_ft_0")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "hybridsim", "run", str(path), "-o", str(out), "--mode", "hybrid",
                        "--no-progress"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2, r.stderr
    assert f"{path}:7:" in r.stderr and "controller.params" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml"))
                         + sorted((REPO / "benchmarks" / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_validate(path, capsys):
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_limits_are_overridable(tmp_path, capsys):
    # 4 x 3e6 = 1.2e7 rank-iterations > 1e7; a window every 10 ms keeps the port samples within their limit
    big = BASE.replace("iterations: 2", "iterations: 3000000") + "sampling: {interval: 10ms}\n"
    p = tmp_path / "s.yaml"
    p.write_text(big)
    assert main(["validate", str(p)]) == 2
    assert "max_rank_iterations" in capsys.readouterr().err
    assert main(["validate", str(p), "--limit", "max_rank_iterations=2e7"]) == 0
    p.write_text(big + "limits: {max_rank_iterations: 20000000}\n")
    assert main(["validate", str(p)]) == 0
    # the command line wins over the file, in both directions
    assert main(["validate", str(p), "--limit", "max_rank_iterations=100"]) == 2
    err = capsys.readouterr().err
    assert f"{p}:5:" in err and "max_rank_iterations = 100" in err
    # YAML bounds only come from the command line
    deep = tmp_path / "deep.yaml"
    deep.write_text(BASE + "description: " + "[" * 100 + "]" * 100 + "\n")
    assert main(["validate", str(deep)]) == 2
    assert main(["validate", str(deep), "--limit", "yaml_depth=200"]) == 2  # a list is not a description
    assert "description" in capsys.readouterr().err
    assert main(["validate", str(p), "--limit", "nosuch=1"]) == 2
    assert "--limit 'nosuch=1'" in capsys.readouterr().err
    assert main(["validate", str(p), "--limit", "max_nodes=0"]) == 2
    assert "--limit max_nodes=0: Input should be greater than or equal to 1" in capsys.readouterr().err


def test_limits_section_is_checked(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "limits: {max_nodes: 0, deadline: -1}\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:7:" in err and "limits.max_nodes" in err and "limits.deadline" in err


def _runs_dir(tmp_path) -> Path:
    return tmp_path / "out"


def test_deadline_fails_the_run(tmp_path, capsys):
    # background traffic for a long virtual time: far more than a second of wall clock
    p = tmp_path / "s.yaml"
    p.write_text("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
                 "jobs:\n  - {name: bg, ranks: 72, workload: {kind: uniform_random, interval: 1000}}\n"
                 "backend: {embedded: {end_time: 1.0e9, progress: false}}\nsampling: {ports: false}\n")
    out = _runs_dir(tmp_path)
    t0 = time.perf_counter()
    rc = main(["run", str(p), "-o", str(out), "--no-progress", "--limit", "deadline=1"])
    wall = time.perf_counter() - t0
    assert rc == 1
    assert wall < 30
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "deadline" in man["reason"] and "1 s" in man["reason"]


def test_runtime_sample_and_packet_limits(tmp_path, capsys, monkeypatch):
    # samples: the injection time of 2 iterations is a lower bound of 17.4 windows of 1 us: over a limit of 1 window
    # x 252 ports it is refused before the run, nothing written; 20 windows pass that bound, and the engine stops at
    # the limit (contention makes the run longer)
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "sampling: {interval: 1us}\nlimits: {max_samples: 252}\n")
    assert main(["run", str(p), "-o", str(tmp_path / "o0"), "--no-progress"]) == 2
    assert "max_samples" in capsys.readouterr().err and not (tmp_path / "o0").exists()
    p.write_text(BASE + "sampling: {interval: 1us}\nlimits: {max_samples: 5040}\n")   # 20 windows x 252 ports
    rc = main(["run", str(p), "-o", str(tmp_path / "o1"), "--no-progress"])
    assert rc == 1
    man = json.loads((tmp_path / "o1" / "manifest.json").read_text())
    assert man["status"] == "failed" and "max_samples" in man["reason"]
    # packets per message: a custom workload's sizes are only known as it runs
    (tmp_path / "bigmsg.py").write_text("from hybridsim.workloads import Program\n"
                                        "def two(rank, iteration, n_ranks):\n"
                                        "    p = Program(rank, n_ranks)\n"
                                        "    p.sendrecv((rank + 1) % n_ranks, 8192, (rank - 1) % n_ranks, 0)\n"
                                        "    return p.ops\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    p.write_text("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
                 "jobs:\n  - {name: c, ranks: 2, iterations: 1, workload: {kind: custom, function: 'bigmsg:two'}}\n"
                 "limits: {max_packets_per_message: 1}\n")
    rc = main(["run", str(p), "-o", str(tmp_path / "o2"), "--no-progress"])
    assert rc == 1
    man = json.loads((tmp_path / "o2" / "manifest.json").read_text())
    assert man["status"] == "failed" and "max_packets_per_message" in man["reason"]
    # LAMMPS sizes follow from its parameters: refused before the run, nothing written
    p.write_text("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
                 "jobs:\n  - {name: l, ranks: 8, iterations: 1, workload: {kind: lammps}}\n"
                 "limits: {max_packets_per_message: 1}\n")
    assert main(["run", str(p), "-o", str(tmp_path / "o3"), "--no-progress"]) == 2
    assert "max_packets_per_message" in capsys.readouterr().err and not (tmp_path / "o3").exists()


@pytest.mark.parametrize("core", ["native", "python"])
def test_an_overload_let_through_is_stopped_at_the_queue_cap(tmp_path, core):
    """limits.max_offered_load lifted by hand: the engine's queue cap stops the run (reason named, memory bounded)."""
    from hybridsim.engine.cores import NATIVE_MISSING

    if core == "native" and NATIVE_MISSING is not None:
        pytest.skip(f"native core not built: {NATIVE_MISSING}")
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "  - {name: bg, ranks: 16, workload: {kind: uniform_random, msg_size: 100000, interval: 1}}\n"
                 f"backend: {{embedded: {{core: {core}}}}}\n")
    out = tmp_path / "out"
    rc = main(["run", str(p), "-o", str(out), "--no-progress", "--limit", "max_offered_load=1e6",
               "--limit", "max_queued_packets=20000"])
    assert rc == 1
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "max_queued_packets" in man["reason"] and "20,000" in man["reason"], man


def test_queue_cap_counts_bytes_in_the_network():
    """The cap is on injected - delivered bytes: a run below it is untouched, and the same run with a cap below what
    it holds at once stops (so the check does run, on real traffic)."""
    from hybridsim.engine import Engine
    from hybridsim.engine.core import LimitExceeded
    from hybridsim.scenario import parse_scenario

    text = BASE.replace("iterations: 2", "iterations: 20").replace("msg_size: 4096", "msg_size: 409600") + \
        "backend: {embedded: {core: python}}\nsampling: {ports: false}\n"
    Engine.QUEUE_CHECK_EVERY, old = 1, Engine.QUEUE_CHECK_EVERY
    try:
        Engine(parse_scenario(text)).run()  # 4 ranks x 409600 B = 400 packets at most: far below the default
        with pytest.raises(LimitExceeded, match="max_queued_packets"):
            Engine(parse_scenario(text + "limits: {max_queued_packets: 100}\n")).run()
    finally:
        Engine.QUEUE_CHECK_EVERY = old


def test_deadline_is_checked_while_a_huge_message_is_cut(tmp_path, monkeypatch):
    """The packet limits lifted by hand: a 2^40-byte message (2^28 packets) is cut with the deadline checked."""
    (tmp_path / "hugemsg.py").write_text("from hybridsim.workloads import Program\n"
                                         "def one(rank, iteration, n_ranks):\n"
                                         "    p = Program(rank, n_ranks)\n"
                                         "    p.sendrecv((rank + 1) % n_ranks, 2**40, (rank - 1) % n_ranks, 0)\n"
                                         "    return p.ops\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    p = tmp_path / "s.yaml"
    p.write_text("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
                 "jobs:\n  - {name: c, ranks: 2, iterations: 1, workload: {kind: custom, function: 'hugemsg:one'}}\n"
                 "backend: {embedded: {core: python}}\n"
                 "limits: {max_packets_per_message: 1000000000, max_queued_packets: 1000000000}\n")
    out = tmp_path / "out"
    t0 = time.perf_counter()
    rc = main(["run", str(p), "-o", str(out), "--no-progress", "--limit", "deadline=0.5"])
    assert rc == 1 and time.perf_counter() - t0 < 20
    man = json.loads((out / "manifest.json").read_text())
    assert "deadline" in man["reason"] and "cutting a message of 268,435,456 packets" in man["reason"], man


SLOW_GEN = ("import time\nfrom hybridsim.workloads import Program\n"
            "def slow(rank, iteration, n_ranks):\n"
            "    time.sleep(0.01)\n"
            "    p = Program(rank, n_ranks)\n"
            "    p.compute(100.0)\n"
            "    return p.ops\n")


def test_deadline_stops_workload_generation(tmp_path, monkeypatch):
    # a generator that takes 10 ms per rank-iteration: 72 ranks x 1000 iterations = 12 min of generating alone
    (tmp_path / "slowgen.py").write_text(SLOW_GEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    p = tmp_path / "s.yaml"
    p.write_text(BASE.replace("ranks: 4", "ranks: 72").replace("iterations: 2", "iterations: 1000").replace(
        "{kind: milc, dimension_sizes: [2, 2], msg_size: 4096}", "{kind: custom, function: 'slowgen:slow'}")
        + "sampling: {ports: false}\n")
    out = tmp_path / "out"
    t0 = time.perf_counter()
    rc = main(["run", str(p), "-o", str(out), "--no-progress", "--limit", "deadline=0.5"])
    wall = time.perf_counter() - t0
    assert rc == 1
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "deadline of 0.5 s" in man["reason"], man
    assert "generating the ops of job 'a'" in man["reason"]
    assert wall < 0.5 + 5  # stopped at the next generator call, not after the 72,000 of them



# ------------------------------------------------------------------------------ the estimates the limits stand on
def test_lammps_grid_in_closed_steps_is_the_loop_of_lammps_cpp():
    from hybridsim.workloads import lammps as L

    brute = []
    for n in range(1, 3000):
        m = n
        while not L._factorable(m):
            m += 1
        brute.append(m)
    assert [L.next_factorable(n) for n in range(1, 3000)] == brute
    for reps in [(1, 1, 1), (2, 1, 1), (1, 3, 1), (4, 4, 4), (1, 1, 30), (100, 1, 1), (7, 5, 3)]:
        prd = [reps[0] * (L.XHI_BASE - L.XLO_BASE), reps[1] * (L.YHI_BASE - L.YLO_BASE),
               reps[2] * (L.ZHI_BASE - L.ZLO_BASE)]
        n = L.N_ATOMS_BASE * reps[0] * reps[1] * reps[2]
        assert L.pppm_decomposition(n, prd) == L._pppm_decomposition_loop(n, prd), reps
    # the replica counts of issue 21: the loop needs ~10^7 steps per dimension, the closed steps a few dozen
    big = [1e6 * (L.XHI_BASE - L.XLO_BASE), L.YHI_BASE - L.YLO_BASE, L.ZHI_BASE - L.ZLO_BASE]
    t0 = time.perf_counter()
    g = L.pppm_decomposition(L.N_ATOMS_BASE * 10**6, big)
    assert all(L._factorable(int(x)) for x in g) and g[0] > 1e7
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("dims,dist", [([3], 1), ([3, 3], 1), ([3, 3], 2), ([4, 3, 2], 2), ([3] * 4, 3),
                                       ([1] * 5, 5)])
def test_neighbour_count_is_the_length_of_the_neighbour_lists(dims, dist):
    from hybridsim.workloads.base import neighbour_count
    from hybridsim.workloads.milc import milc_neighbors
    from hybridsim.workloads.nearest_neighbor import nn_neighbors

    assert neighbour_count(len(dims), dist) == len(milc_neighbors(0, dims, dist)) == len(nn_neighbors(0, dims, dist))


@pytest.mark.parametrize("kind,ranks", [("milc", 16), ("nn", 16), ("allreduce", 6), ("lammps", 8)])
def test_estimated_cost_matches_the_generated_ops(kind, ranks):
    """Op count, largest message to another rank and compute per iteration from the parameters alone, against the
    ops the generator builds (largest message over all ranks; ops of rank 0, for allreduce of the last rank, past
    MPICH's fold; LAMMPS: a plain step with FFT peers estimated, so its op count within 2x)."""
    from hybridsim.scenario import Job
    from hybridsim.workloads import COMPUTE, ISEND, SEND, build_workload, estimate_cost

    w = {"milc": {"kind": "milc", "dimension_sizes": [4, 4], "msg_size": 10000, "compute_delay": 400},
         "nn": {"kind": "nn", "dimension_sizes": [4, 4], "msg_size": 10000, "max_dimension_distance": 2},
         "allreduce": {"kind": "allreduce", "size": 100000, "count": 3},
         "lammps": {"kind": "lammps"}}[kind]
    job = Job(name="j", ranks=ranks, iterations=1, workload=w)
    rank = ranks - 1 if kind == "allreduce" else 0
    wl = build_workload(job)
    ops = wl.ops(rank, 0)
    cost = estimate_cost(job, 4096)
    sizes = [op[2] for r in range(ranks) for op in wl.ops(r, 0) if op[0] in (ISEND, SEND) and op[1] != r]
    assert cost.max_message == max(sizes)
    assert cost.compute_ns == pytest.approx(sum(op[1] for op in ops if op[0] == COMPUTE))
    if kind == "lammps":
        assert len(ops) / 2 <= cost.ops <= 2 * len(ops)
    else:
        assert cost.ops == len(ops)


# ------------------------------------------------------------------------------------------------------ plug-ins
#: a module that leaves a marker file when imported, i.e. when its code runs
MARKING = ("import pathlib\npathlib.Path({marker!r}).write_text('imported')\n"
           "from controllers import Policy\n"
           "class P(Policy):\n    def decide(self, view):\n        return 'simulate'\n"
           "def ring(rank, iteration, n_ranks):\n"
           "    from hybridsim.workloads import compute\n    return [compute(1.0)]\n")


def _clean_run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m hybridsim ARGS`` in ``cwd`` with nothing on sys.path but the repository (PYTHONPATH) and what
    the interpreter adds itself: ``-m`` puts the working directory first."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return subprocess.run([sys.executable, "-m", "hybridsim", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**env, "PYTHONPATH": str(REPO)})


@pytest.fixture
def marking_scenarios(tmp_path):
    """A folder with a policy scenario, a custom-workload scenario and their module ``evilmod.py`` beside them."""
    d = tmp_path / "scen"
    d.mkdir()
    marker = tmp_path / "imported"
    (d / "evilmod.py").write_text(MARKING.format(marker=str(marker)))
    (d / "pol.yaml").write_text(BASE + "controller: {policy: 'evilmod:P'}\n")
    (d / "wl.yaml").write_text(BASE.replace("kind: milc, dimension_sizes: [2, 2], msg_size: 4096",
                                            "kind: custom, function: 'evilmod:ring'"))
    return d, marker


@pytest.mark.parametrize("scenario", ["pol.yaml", "wl.yaml"])
@pytest.mark.parametrize("where", ["scenario folder", "elsewhere"])
def test_validate_imports_nothing_from_the_scenario_folder(marking_scenarios, tmp_path, scenario, where):
    d, marker = marking_scenarios
    cwd = d if where == "scenario folder" else tmp_path
    r = _clean_run(["validate", str(d / scenario)], cwd)
    assert r.returncode == 2, r.stderr
    assert not marker.exists(), "validate ran the module next to the scenario"
    field = "controller.policy" if scenario == "pol.yaml" else "jobs.0.workload.function"
    assert f"{d / scenario}:7:" in r.stderr or f"{d / scenario}:6:" in r.stderr, r.stderr
    assert field in r.stderr and "evilmod" in r.stderr and "--plugin-path" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("scenario,mode", [("pol.yaml", "hybrid"), ("wl.yaml", "simulate"), ("wl.yaml", "hybrid")])
def test_run_imports_nothing_from_the_working_directory(marking_scenarios, scenario, mode):
    d, marker = marking_scenarios
    before = sorted(p.name for p in d.iterdir())
    r = _clean_run(["run", scenario, "-o", "out", "--mode", mode, "--no-progress"], d)
    assert r.returncode == 2, r.stderr
    assert not marker.exists()
    assert "--plugin-path" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in d.iterdir()) == before  # no run directory


def test_plugin_path_is_the_explicit_way_in(marking_scenarios, tmp_path):
    d, marker = marking_scenarios
    r = _clean_run(["validate", str(d / "pol.yaml"), "--plugin-path", str(d)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert marker.read_text() == "imported"
    marker.unlink()
    r = _clean_run(["run", "wl.yaml", "-o", "out", "--no-progress", "--plugin-path", "."], d)
    assert r.returncode == 0, r.stderr
    assert marker.exists() and json.loads((d / "out" / "manifest.json").read_text())["status"] == "completed"
    r = _clean_run(["validate", "pol.yaml", "--plugin-path", "nosuch"], d)
    assert r.returncode == 2 and "--plugin-path nosuch: not a folder" in r.stderr


def test_pythonpath_counts_as_saying_so(marking_scenarios):
    # the working directory named in PYTHONPATH (as this project's own instructions do) is the user's choice
    d, marker = marking_scenarios
    r = subprocess.run([sys.executable, "-m", "hybridsim", "validate", "pol.yaml"], capture_output=True, text=True,
                       timeout=120, cwd=d, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(d)])})
    assert r.returncode == 0, r.stderr
    assert marker.exists()


def test_shipped_example_policy_runs_through_plugin_path(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "controller: {policy: 'examples.policies.every_other:EveryOther', params: {warmup: 1}}\n")
    r = _clean_run(["run", str(p), "-o", str(tmp_path / "out"), "--mode", "hybrid", "--no-progress",
                    "--plugin-path", "."], REPO)  # as the README says, from the repository root
    assert r.returncode == 0, r.stderr
    hybrid = json.loads((tmp_path / "out" / "summary.json").read_text())["hybrid"]
    # EveryOther(warmup=1) on 2 iterations: iteration 0 simulated (warm-up), iteration 1 predicted
    assert hybrid["policy"] == "examples.policies.every_other:EveryOther"
    assert (hybrid["jobs"]["a"]["simulated_iterations"], hybrid["jobs"]["a"]["predicted_iterations"]) == (1, 1)


# ------------------------------------------------------------------------------------------------ checkpoints
def _safetensors(tensors: dict) -> bytes:
    """A safetensors file by hand (8-byte header length, JSON header, data), so the test needs no torch."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    return len(h).to_bytes(8, "little") + h + data


RIDGE = '{"model": "ridge", "config": {"k": 4}}'
PRETRAINED = '{"model": "pretrained", "config": {"weights": "none"}}'
#: id -> (checkpoint files, fragment of the message); every one passed validate on main (folder found) and then
#: failed the hybrid run, or ran a checkpoint that was not one
CHECKPOINTS: dict[str, tuple[dict, str]] = {
    "garbage_config": ({"config.json": bytes(range(256))}, "not UTF-8"),
    "deep_config": ({"config.json": "[" * 100_000 + "]" * 100_000}, "nested too deep"),
    "config_a_list": ({"config.json": "[1, 2]"}, "expected {\"model\""),
    "model_not_a_name": ({"config.json": '{"model": [1], "config": {}}'}, "expected {\"model\""),
    "unknown_model": ({"config.json": '{"model": "nosuch"}'}, "unknown surrogate model 'nosuch'"),
    "bad_option_value": ({"config.json": '{"model": "ridge", "config": {"k": "many"}}'}, "bad options for model"),
    "unknown_option": ({"config.json": '{"model": "ridge", "config": {"kk": 3}}'}, "unknown config key 'kk'"),
    "pickle_as_weights": ({"config.json": PRETRAINED, "model.safetensors": b"\x80\x04\x95" + b"cos\nsystem\n" * 20},
                          "model.safetensors: corrupt weights"),
    "weights_of_another_net": ({"config.json": PRETRAINED,
                                "model.safetensors": _safetensors({"x": ("F32", [2], bytes(8))})},
                               "weights do not fit"),
    "huge_config": ({"config.json": '{"model": "ridge", "x": "' + "x" * (2 << 20) + '"}'}, "more than"),
    "index_escapes": ({"train.json": json.dumps({"format": "hybridsim-surrogate-checkpoints", "model": "ridge",
                                                 "jobs": {"a": "/etc"}})}, "not a sub-folder of the checkpoint"),
    "empty_folder": ({}, "not a surrogate checkpoint"),
}


def _checkpoint(tmp_path: Path, name: str) -> Path:
    ck = tmp_path / "ck"
    ck.mkdir()
    for fname, content in CHECKPOINTS[name][0].items():
        (ck / fname).write_bytes(content if isinstance(content, bytes) else content.encode())
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "surrogate: {model: ./ck}\n")
    return p


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_validate_loads_the_checkpoint(tmp_path, capsys, name):
    p = _checkpoint(tmp_path, name)
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:7:" in err and "surrogate.model" in err and str(tmp_path / "ck") in err, err
    assert CHECKPOINTS[name][1] in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["pickle_as_weights", "bad_option_value", "index_escapes"])
def test_hybrid_run_refuses_a_broken_checkpoint_before_any_run_directory(tmp_path, capsys, name):
    p = _checkpoint(tmp_path, name)
    assert main(["run", str(p), "-o", str(tmp_path / "out"), "--mode", "hybrid", "--no-progress"]) == 2
    assert CHECKPOINTS[name][1] in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_etc_as_checkpoint(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "surrogate: {model: /etc}\n")
    assert main(["validate", str(p)]) == 2
    assert "/etc: not a surrogate checkpoint" in capsys.readouterr().err


def test_a_saved_checkpoint_still_validates(tmp_path, capsys):
    from surrogate.registry import create

    create("ridge", k=4).save(tmp_path / "ck")
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "surrogate: {model: ./ck}\n")
    assert main(["validate", str(p)]) == 0, capsys.readouterr().err


def test_pretrained_weights_take_a_path(tmp_path, capsys):
    import surrogate
    from surrogate.models.pretrained import SHIPPED

    for weights in (SHIPPED / "model.safetensors", SHIPPED):
        p = tmp_path / "s.yaml"
        p.write_text(BASE + f"surrogate: {{model: 'pretrained:weights={weights}'}}\n")
        assert main(["validate", str(p)]) == 0, capsys.readouterr().err
        src = surrogate.load(f"pretrained:weights={weights}")
        assert src.path is None and src.name == "pretrained"
        # the same network as the shipped one: identical first-layer weights
        m, shipped = src.new(), surrogate.load("pretrained").new()
        assert all((a[0] == b[0]).all() for a, b in zip(m._w, shipped._w))
    p.write_text(BASE + "surrogate: {model: 'pretrained:weights=/etc/passwd'}\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "surrogate.model" in err and "/etc/passwd: corrupt weights" in err


# ------------------------------------------------------------------------------------------------ model option bounds
def _int_options(cls) -> list[str]:
    """The integer constructor options of a model (by annotation): the ones that size a network, a history or a
    loop, ``seed`` aside."""
    import inspect

    return [n for n, p in inspect.signature(cls).parameters.items()
            if "int" in str(p.annotation) and n != "seed"]


def test_every_integer_option_of_a_builtin_model_has_a_bound():
    from surrogate.registry import BUILTIN, model_class

    for name in BUILTIN:
        cls = model_class(name)
        missing = [n for n in _int_options(cls) if n not in cls.bounds]
        assert not missing, f"{name}: no bound for {missing}"


@pytest.fixture
def built_modules(monkeypatch):
    """How many torch modules get constructed while the test runs."""
    import torch

    count = [0]
    init = torch.nn.Module.__init__

    def counting(self, *a, **kw):
        count[0] += 1
        init(self, *a, **kw)

    monkeypatch.setattr(torch.nn.Module, "__init__", counting)
    return count


@pytest.mark.parametrize("name", ["lstm", "dcrnn", "smart", "smart-nollm", "pretrained", "ridge", "mean", "ewma"])
def test_each_bounded_option_is_refused_before_anything_is_built(name, built_modules):
    """Every declared bound, one over it (and 10^8 times over it), through every door that builds a model from
    options: check_config (validate, the preflight), surrogate.load(check=True), ModelSource.new / registry.create
    (the gRPC service, the CODES director). Nothing is built: no torch module, a small allocation peak."""
    import tracemalloc

    import surrogate
    from surrogate.base import OptionBoundError
    from surrogate.registry import check_config, create, model_class

    cls = model_class(name)
    assert cls.bounds
    for key, hi in cls.bounds.items():
        if key not in _int_options(cls) and key not in ("tune_prior",):
            continue  # a shared bound of an option this model does not take
        for v in (int(hi) + 1, int(hi) * 10**8):
            doors = (lambda: check_config(name, {key: v}), lambda: surrogate.load(name, {key: v}, check=True),
                     lambda: surrogate.load(f"{name}:{key}={v}").new(), lambda: create(name, **{key: v}))
            for door in doors:
                tracemalloc.start()
                with pytest.raises(OptionBoundError) as exc:
                    door()
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                assert exc.value.key == key and f"{key}={v}" in str(exc.value) and f"at most {hi}" in str(exc.value)
                assert peak < 1 << 20, (name, key, peak)
    assert built_modules[0] == 0


def test_a_checkpoint_over_a_bound_is_refused_before_its_network_is_built(tmp_path, capsys, built_modules):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text('{"model": "lstm", "config": {"hidden": 100000000, "epochs": 5}}')
    p = tmp_path / "s.yaml"
    p.write_text(BASE + "surrogate: {model: ./ck}\n")
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "surrogate.model" in err and "config.json: lstm: option hidden=100000000 must be a number at most" in err
    assert built_modules[0] == 0


def test_options_at_their_bound_are_accepted():
    from surrogate.registry import check_config

    check_config("ridge", {"k": 4096})
    check_config("lstm", {"epochs": 100_000, "patience": 100_000, "k": 4096})

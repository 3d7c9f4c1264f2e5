"""The least time any exact per-node scan can take on this machine with ONNX Runtime's CPU
kernels: every variant runs only the nodes its difference reaches, at the kernels' own
measured times, with no quantizing, no session to open, no run overhead and every value
upstream of the difference reused for free.

A node's scan has two variants: that node alone quantized (`sqnr_only_db`: the float model
with one node changed) and every node but that one (`sqnr_without_db`: the recipe's QDQ
model with one node changed). Whatever method computes their figures exactly must run, on
every sample, each node downstream of the changed one in that variant's arithmetic: the
float model's kernels for the first, the QDQ model's fused integer kernels for the second.
Its cost here is that sum, from an ONNX Runtime profile of the float and the QDQ model (one
thread, without the blocked float layout, as both scan methods run), divided by the scan's
workers. The changed node's own kernel is left out, so the figure is a lower bound.
"""
import collections
import json
import tempfile

import numpy as np
import onnx
import onnxruntime as ort


def kernel_times(model_path, samples):
    """The ONNX Runtime graph the session ran (nodes in its order) and each node's kernel
    time per run, in seconds, over `samples` runs after a first one left out (warm-up)."""
    with tempfile.TemporaryDirectory() as folder:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = f"{folder}/profile"
        options.optimized_model_filepath = f"{folder}/optimized.onnx"
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"],
                                       disabled_optimizers=["NchwcTransformer"])
        name = session.get_inputs()[0].name
        session.run(None, {name: samples[0:1]})
        for i in range(len(samples)):
            session.run(None, {name: samples[i:i + 1]})
        with open(session.end_profiling()) as profile:
            events = json.load(profile)
        graph = onnx.load(f"{folder}/optimized.onnx", load_external_data=False).graph
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    warmed = runs[0][1]
    per_run = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= warmed:
            per_run[e["name"][: -len("_kernel_time")]] += e["dur"] * 1e-6 / len(samples)
    return graph, per_run


def downstream_costs(float_graph, original, graph, per_run, scanned):
    """Per scanned node (name -> seconds a run): the kernel times of the nodes of ONNX
    Runtime's `graph` (optimized from `original`) downstream of it. The node's outputs in
    `float_graph` (a node the quantizer folded away, a Clip into its Conv, left its output's
    name to the node before it) are followed through `original` until they reach tensors
    that `graph` still has (a fused node takes its last member's output); the nodes reading
    those, and all below them, count, but for the fused node that produced them."""
    nodes = list(graph.node)
    producer = {t: i for i, n in enumerate(nodes) for t in n.output}
    readers = collections.defaultdict(set)
    for i, n in enumerate(nodes):
        for t in n.input:
            readers[t].add(i)
    below = collections.defaultdict(set)
    for i, n in enumerate(nodes):
        for t in n.output:
            below[i] |= readers[t]
    original_readers = collections.defaultdict(list)
    for n in original.node:
        for t in n.input:
            original_readers[t].append(n)
    by_name = {n.name: n for n in float_graph.node}
    costs = {}
    for name in scanned:
        node = by_name.get(name)
        if node is None:
            continue
        heads, start, seen, stack = set(), set(), set(), list(node.output)
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in producer:
                heads.add(producer[t])
                start |= below[producer[t]]
            elif t in readers:
                start |= readers[t]
            else:
                for reader in original_readers[t]:
                    stack.extend(reader.output)
        reached, stack = set(start), list(start)
        while stack:
            for j in below[stack.pop()]:
                if j not in reached:
                    reached.add(j)
                    stack.append(j)
        costs[name] = sum(per_run.get(nodes[j].name, 0.0) for j in reached - heads)
    return costs


def scan_floor(float_path, quant_path, data_path, scan):
    """Seconds (wall, on the scan's workers) the least exact scan of `scan` (the exact
    method's JSON `scan` object) takes, and how many of its nodes were found."""
    data = np.load(data_path)
    float_model = onnx.load(str(float_path), load_external_data=False)
    samples = data[float_model.graph.input[0].name]
    quant_model = onnx.load(str(quant_path), load_external_data=False)
    scanned = [n["node"] for n in scan["nodes"]]
    total = 0.0
    found = set(scanned)
    for path, model, key in ((float_path, float_model, "sqnr_only_db"),
                             (quant_path, quant_model, "sqnr_without_db")):
        graph, per_run = kernel_times(path, samples)
        costs = downstream_costs(float_model.graph, model.graph, graph, per_run, scanned)
        found &= set(costs)
        total += sum(costs[n["node"]] for n in scan["nodes"]
                     if n["node"] in costs and n.get(key) is not None) * len(samples)
    return total / max(scan.get("workers", 1), 1), len(found)

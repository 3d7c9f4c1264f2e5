"""How ONNX Runtime's CPU integer kernels follow a QDQ model's Q/DQ arithmetic, measured.

1. Pairing: on x86 without VNNI the u8 x s8 kernels add two neighbouring products in one signed
   16-bit lane (`vpmaddubsw`), which saturates. For MatMul, Gemm (transB), Conv and depthwise
   Conv this finds which two weight positions share a lane: with every activation code 255 and
   two weights of 100 (255 x 200 > 32767), the fused result differs from the unfused one exactly
   when the two positions are paired. On CPUs whose kernels do not saturate (VNNI, ARM) nothing
   pairs.
2. Per node (with --model and --data): each fused Q/DQ group of a QDQ model run on the codes
   its unfused run produces, fused (all graph optimizations) and unfused (none); the nodes whose
   output codes differ, with the largest difference. Saturation shows as differences of many
   codes; rounding of the fused QLinearAdd/QLinearMul as differences of one.

Run: bash benches/saturation/run.sh [--model q.onnx --data calib.npz]
"""
import argparse
import itertools

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

FUSED, UNFUSED = ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL


def session(model_bytes, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def probe_model(op, weight, group=1):
    """x -> Q -> DQ -> op(DQ(weight)) -> Q -> DQ: activation 1.0 is code 255, weight code 100
    is 1.0, the output step 8/255."""
    inits = [nh.from_array(np.array(1 / 255, np.float32), "sx"), nh.from_array(np.array(0, np.uint8), "zx"),
             nh.from_array(weight, "wq"), nh.from_array(np.array(0.01, np.float32), "sw"),
             nh.from_array(np.array(0, np.int8), "zw"), nh.from_array(np.array(8 / 255, np.float32), "so"),
             nh.from_array(np.array(0, np.uint8), "zo")]
    attrs = {"group": group} if op == "Conv" else {"transB": 1} if op == "Gemm" else {}
    nodes = [h.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             h.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"]),
             h.make_node(op, ["xd", "wd"], ["c"], **attrs),
             h.make_node("QuantizeLinear", ["c", "so", "zo"], ["cq"]),
             h.make_node("DequantizeLinear", ["cq", "so", "zo"], ["y"])]
    graph = h.make_graph(nodes, "probe", [h.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def pairs(op, wshape, xshape, group=1):
    """The pairs of positions of one output channel's weights that share a 16-bit lane."""
    x = np.ones(xshape, np.float32)
    channel = [ix for ix in np.ndindex(*wshape) if (ix[-1] if op == "MatMul" else ix[0]) == 0]
    found = []
    for a, b in itertools.combinations(channel, 2):
        w = np.zeros(wshape, np.int8)
        w[a] = w[b] = 100
        model = probe_model(op, w, group)
        fused, unfused = (session(model, level).run(None, {"x": x})[0] for level in (FUSED, UNFUSED))
        if not np.allclose(fused, unfused, atol=0.05):
            found.append((a, b))
    return found


def pairing():
    cases = [
        ("MatMul [K=6, N=2]: rows of a column", "MatMul", (6, 2), (1, 6), 1),
        ("Gemm transB [N=2, K=6]: values of a row", "Gemm", (2, 6), (1, 6), 1),
        ("Conv [M=2, C=3, 2x1]: (channel, tap)", "Conv", (2, 3, 2, 1), (1, 3, 2, 1), 1),
        ("Conv [M=2, C=4, 1x1]", "Conv", (2, 4, 1, 1), (1, 4, 1, 1), 1),
        ("depthwise Conv [M=2, C=1, 3x3], group 2", "Conv", (2, 1, 3, 3), (1, 2, 3, 3), 2),
    ]
    for label, op, wshape, xshape, group in cases:
        found = pairs(op, wshape, xshape, group)
        shown = ", ".join(f"{a[1:] if op != 'MatMul' else a[:1]}~{b[1:] if op != 'MatMul' else b[:1]}"
                          for a, b in found) or "none"
        print(f"  {label:45} paired: {shown}")


def per_node(model_path, data_path, samples):
    model = onnx.load(model_path)
    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.output,
                                                             *inferred.graph.input]}
    initializers = {t.name for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    quantizer = {n.input[0]: n for n in graph.node if n.op_type == "QuantizeLinear"}
    everything = onnx.ModelProto()
    everything.CopyFrom(inferred)
    names = [o for n in graph.node for o in n.output if o in types]
    del everything.graph.output[:]
    everything.graph.output.extend(h.make_tensor_value_info(n, types[n], None) for n in names)
    data = np.load(data_path)
    feed = {i.name: data[i.name if i.name in data else list(data.keys())[0]][:samples] for i in graph.input
            if i.name not in initializers}
    values = dict(zip(names, session(everything.SerializeToString(), UNFUSED).run(None, feed)))
    values.update(feed)
    differing = 0
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        q = quantizer.get(node.output[0])
        if q is None:
            continue
        group, inputs = [], []
        for name in filter(None, node.input):
            dq = producer.get(name)
            if dq is not None and dq.op_type == "DequantizeLinear":
                group.append(dq)
                source = dq.input[0]
            else:
                source = name
            if source not in initializers and source in values:
                inputs.append(source)
        group += [node, q]
        used = {i for n in group for i in n.input}
        sub = h.make_graph(group, "node", [h.make_tensor_value_info(i, types[i], None) for i in dict.fromkeys(inputs)],
                           [h.make_tensor_value_info(q.output[0], types[q.output[0]], None)],
                           [t for t in graph.initializer if t.name in used])
        single = h.make_model(sub, opset_imports=model.opset_import)
        single.ir_version = model.ir_version
        fed = {i: values[i] for i in dict.fromkeys(inputs)}
        fused, unfused = (session(single.SerializeToString(), level).run(None, fed)[0].astype(np.int32)
                          for level in (FUSED, UNFUSED))
        diff = np.abs(fused - unfused)
        if diff.max() > 0:
            differing += 1
            print(f"  {node.name:40} {node.op_type:12} codes differing {int((diff > 0).sum()):7d} of {diff.size:8d},"
                  f" by up to {int(diff.max())}")
    print(f"  {differing} node(s) whose fused kernel differs from the Q/DQ arithmetic")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a QDQ model to check node by node")
    parser.add_argument("--data", help="its input data (.npz)")
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}: which weights share a saturating 16-bit lane")
    pairing()
    if args.model and args.data:
        print(f"{args.model}: fused kernels against the Q/DQ arithmetic, node by node, on {args.samples} samples")
        per_node(args.model, args.data, args.samples)


if __name__ == "__main__":
    main()

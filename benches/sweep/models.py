"""Hand-built models for the technique sweep (benches/sweep/run.sh): realistic structure,
random weights. Writes NAME.onnx, NAME.calib.npz and NAME.eval.npz into the folder given.

- mobilenet: MobileNetV2-style (batch norms, expand -> depthwise -> project with ReLU6,
  residual adds, ConvTranspose, Gemm transB);
- vit: two pre-LN transformer blocks (LayerNorm -> q/k/v, Erf GELU, one outlier weight);
- odd: Conv1d, grouped Conv, a batched (3-d) MatMul weight, Gemm transA (batch 8 only);
- dense: Gemm -> ReLU6 -> MatMul+Add -> ReLU6 -> Gemm;
- mobilenet16 / vit16: the same in float16; mobilenet9: opset 9 with Clip attributes.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)


def path(name):
    return os.path.join(OUT, name)

def init(name, a): return nh.from_array(np.asarray(a, dtype=np.float32), name)
def save(nodes, inits, inputs, outputs, name, opset=17):
    g = h.make_graph(nodes, name, inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path(f"{name}.onnx"))

def wconv(co, ci, k, spread=True):
    w = rng.normal(0, 1/np.sqrt(ci*k*k), (co, ci, k, k))
    if spread: w *= np.exp(rng.normal(0, 0.8, (co,1,1,1)))
    return w

# 1. MobileNetV2-like: conv-bn-relu6, depthwise, project, residual, transpose conv, GAP, Gemm(transB)
def mobilenet():
    n, ins = [], []
    x = "x"; c = 3
    def conv(x, ci, co, k, stride=1, group=1, act=True, name=""):
        w = wconv(co, ci//group, k)
        ins.append(init(name+"_w", w)); ins.append(init(name+"_b", rng.normal(0, .1, co)))
        n.append(h.make_node("Conv", [x, name+"_w", name+"_b"], [name+"_c"], name=name, kernel_shape=[k,k], strides=[stride,stride], pads=[k//2]*4, group=group))
        # BN
        for p, v in [("s", np.exp(rng.normal(0,.5,co))), ("bb", rng.normal(0,.2,co)), ("m", rng.normal(0,.1,co)), ("v", np.exp(rng.normal(0,.3,co)))]:
            ins.append(init(f"{name}_{p}", v))
        n.append(h.make_node("BatchNormalization", [name+"_c", name+"_s", name+"_bb", name+"_m", name+"_v"], [name+"_bn"], name=name+"_bn"))
        if not act: return name+"_bn"
        ins.append(init(name+"_lo", 0.0)); ins.append(init(name+"_hi", 6.0))
        n.append(h.make_node("Clip", [name+"_bn", name+"_lo", name+"_hi"], [name+"_r"], name=name+"_relu6"))
        return name+"_r"
    x = conv(x, 3, 16, 3, 2, name="stem")
    for i, (ci, co, s) in enumerate([(16, 16, 1), (16, 24, 2), (24, 24, 1), (24, 32, 2)]):
        e = conv(x, ci, ci*4, 1, name=f"b{i}_exp")
        d = conv(e, ci*4, ci*4, 3, s, group=ci*4, name=f"b{i}_dw")
        p = conv(d, ci*4, co, 1, act=False, name=f"b{i}_proj")
        if ci == co and s == 1:
            n.append(h.make_node("Add", [x, p], [f"b{i}_add"], name=f"b{i}_add")); x = f"b{i}_add"
        else: x = p
    ins.append(init("up_w", rng.normal(0, .1, (32, 8, 2, 2))))
    n.append(h.make_node("ConvTranspose", [x, "up_w"], ["up"], name="up", strides=[2,2]))
    n.append(h.make_node("GlobalAveragePool", ["up"], ["gap"], name="gap"))
    n.append(h.make_node("Flatten", ["gap"], ["flat"], name="flat"))
    ins.append(init("fc_w", rng.normal(0, .3, (10, 8)))); ins.append(init("fc_b", rng.normal(0, .1, 10)))
    n.append(h.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1))
    save(n, ins, [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 64, 64])], [h.make_tensor_value_info("logits", T.FLOAT, ["N", 10])], "mobilenet")

# 2. Pre-LN ViT-like block x2 with outlier weights, Gemm-free MatMul, 3D, attention with Softmax, GELU via Erf
def vit():
    n, ins = [], []
    d, f, heads, L = 64, 256, 4, 16
    x = "x"
    ins.append(init("sqrt2", np.sqrt(2.0))); ins.append(init("one", 1.0)); ins.append(init("half", 0.5))
    ins.append(init("scale", 1/np.sqrt(d//heads)))
    ins.append(init("shape_h", np.array([0, L, heads, d//heads]).astype(np.int64)) if False else nh.from_array(np.array([0, -1, heads, d//heads], dtype=np.int64), "shape_h"))
    ins.append(nh.from_array(np.array([0, -1, d], dtype=np.int64), "shape_m"))
    for l in range(2):
        p = f"l{l}"
        def ln(x, name):
            ins.append(init(name+"_g", np.exp(rng.normal(0, .3, d)))); ins.append(init(name+"_b", rng.normal(0, .1, d)))
            n.append(h.make_node("LayerNormalization", [x, name+"_g", name+"_b"], [name+"_o"], name=name, axis=-1))
            return name+"_o"
        def lin(x, ci, co, name, outlier=False):
            w = rng.normal(0, 1/np.sqrt(ci), (ci, co))
            if outlier: w[rng.integers(ci), rng.integers(co)] = 40/np.sqrt(ci)
            ins.append(init(name+"_w", w)); ins.append(init(name+"_b", rng.normal(0, .05, co)))
            n.append(h.make_node("MatMul", [x, name+"_w"], [name+"_mm"], name=name))
            n.append(h.make_node("Add", [name+"_mm", name+"_b"], [name+"_o"], name=name+"_add"))
            return name+"_o"
        a = ln(x, p+"_ln1")
        qkv = [lin(a, d, d, f"{p}_{t}") for t in "qkv"]
        hs = []
        for t, v in zip("qkv", qkv):
            n.append(h.make_node("Reshape", [v, "shape_h"], [f"{p}_{t}_r"], name=f"{p}_{t}_r"))
            n.append(h.make_node("Transpose", [f"{p}_{t}_r"], [f"{p}_{t}_t"], name=f"{p}_{t}_t", perm=[0,2,3,1] if t=="k" else [0,2,1,3]))
            hs.append(f"{p}_{t}_t")
        n.append(h.make_node("MatMul", [hs[0], hs[1]], [p+"_s"], name=p+"_qk"))
        n.append(h.make_node("Mul", [p+"_s", "scale"], [p+"_ss"], name=p+"_sc"))
        n.append(h.make_node("Softmax", [p+"_ss"], [p+"_p"], name=p+"_sm", axis=-1))
        n.append(h.make_node("MatMul", [p+"_p", hs[2]], [p+"_ctx"], name=p+"_pv"))
        n.append(h.make_node("Transpose", [p+"_ctx"], [p+"_ct"], name=p+"_ct", perm=[0,2,1,3]))
        n.append(h.make_node("Reshape", [p+"_ct", "shape_m"], [p+"_cm"], name=p+"_cm"))
        o = lin(p+"_cm", d, d, p+"_o")
        n.append(h.make_node("Add", [x, o], [p+"_r1"], name=p+"_r1"))
        b = ln(p+"_r1", p+"_ln2")
        u = lin(b, d, f, p+"_fc1")
        n.append(h.make_node("Div", [u, "sqrt2"], [p+"_gd"], name=p+"_gd"))
        n.append(h.make_node("Erf", [p+"_gd"], [p+"_ge"], name=p+"_ge"))
        n.append(h.make_node("Add", [p+"_ge", "one"], [p+"_ga"], name=p+"_ga"))
        n.append(h.make_node("Mul", [u, p+"_ga"], [p+"_gm"], name=p+"_gm"))
        n.append(h.make_node("Mul", [p+"_gm", "half"], [p+"_gelu"], name=p+"_gelu"))
        v = lin(p+"_gelu", f, d, p+"_fc2", outlier=(l == 0))
        n.append(h.make_node("Add", [p+"_r1", v], [p+"_r2"], name=p+"_r2"))
        x = p+"_r2"
    save(n, ins, [h.make_tensor_value_info("x", T.FLOAT, ["N", L, d])], [h.make_tensor_value_info(x, T.FLOAT, ["N", L, d])], "vit")

# 3. Conv1d + Conv3d + grouped conv + Gemm transA + MatMul with batched 3D weight
def odd():
    n, ins = [], []
    ins.append(init("c1_w", rng.normal(0, .3, (8, 4, 3)))); ins.append(init("c1_b", rng.normal(0, .1, 8)))
    n.append(h.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], name="conv1d", pads=[1,1]))
    n.append(h.make_node("Relu", ["c1"], ["r1"], name="r1"))
    ins.append(init("c2_w", rng.normal(0, .3, (8, 2, 3)) * np.exp(rng.normal(0,1,(8,1,1)))))
    n.append(h.make_node("Conv", ["r1", "c2_w"], ["c2"], name="conv_grouped", pads=[1,1], group=4))
    n.append(h.make_node("Relu", ["c2"], ["r2"], name="r2"))
    ins.append(init("bw", rng.normal(0, .3, (8, 32, 16))))
    n.append(h.make_node("MatMul", ["r2", "bw"], ["bm"], name="batched_matmul"))  # [N,8,32]x[8,32,16]
    n.append(h.make_node("ReduceMean", ["bm"], ["red"], name="red", axes=[1], keepdims=0))  # [N,16]
    ins.append(init("g_w", rng.normal(0, .3, (16, 5))))
    n.append(h.make_node("Transpose", ["red"], ["redt"], name="redt", perm=[1,0]))
    n.append(h.make_node("Gemm", ["redt", "g_w"], ["y"], name="gemm_transA", transA=1))
    save(n, ins, [h.make_tensor_value_info("x", T.FLOAT, ["N", 4, 32])], [h.make_tensor_value_info("y", T.FLOAT, ["N", 5])], "odd", opset=17)



def dense():
    rng = np.random.default_rng(5)
    def I(n, a): return nh.from_array(np.asarray(a, np.float32), n)
    ins = [I("w1", rng.normal(0, 1, (32, 16)) * np.exp(rng.normal(0, 1, (32, 1)))), I("b1", rng.normal(0, .5, 32)),
           I("w2", rng.normal(0, .3, (32, 24))), I("b2", rng.normal(0, .5, 24)),
           I("w3", rng.normal(0, .3, (8, 24))), I("lo", 0.0), I("hi", 6.0)]
    n = [h.make_node("Gemm", ["x", "w1", "b1"], ["g1"], name="g1", transB=1),
         h.make_node("Clip", ["g1", "lo", "hi"], ["r1"], name="r1"),
         h.make_node("MatMul", ["r1", "w2"], ["m2"], name="m2"),
         h.make_node("Add", ["m2", "b2"], ["a2"], name="a2"),
         h.make_node("Clip", ["a2", "lo", "hi"], ["r2"], name="r2"),
         h.make_node("Gemm", ["r2", "w3"], ["y"], name="g3", transB=1)]
    g = h.make_graph(n, "dense", [h.make_tensor_value_info("x", T.FLOAT, ["N", 16])], [h.make_tensor_value_info("y", T.FLOAT, ["N", 8])], ins)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]); m.ir_version = 8
    onnx.save(m, path("dense.onnx"))
    for p, s in [("calib", 1), ("eval", 2)]:
        np.savez(path(f"dense.{p}.npz"), x=(np.random.default_rng(s).normal(0, 3, (256, 16))).astype(np.float32))


def half(name):
    """A float16 twin of `name` (every float initializer, input and output)."""
    m = onnx.load(path(f"{name}.onnx"))
    g = m.graph
    new = []
    for t in g.initializer:
        a = nh.to_array(t)
        new.append(nh.from_array(a.astype(np.float16) if a.dtype == np.float32 else a, t.name))
    del g.initializer[:]
    g.initializer.extend(new)
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == T.FLOAT:
            v.type.tensor_type.elem_type = T.FLOAT16
    onnx.save(m, path(f"{name}16.onnx"))
    for part in ["calib", "eval"]:
        x = np.load(path(f"{name}.{part}.npz"))["x"]
        np.savez(path(f"{name}16.{part}.npz"), x=x.astype(np.float16))


def opset9(name):
    """An opset-9 twin of `name`: Clip bounds as attributes."""
    m = onnx.load(path(f"{name}.onnx"))
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    for n in g.node:
        if n.op_type == "Clip":
            lo, hi = (float(nh.to_array(inits[i])) for i in n.input[1:3])
            del n.input[1:]
            n.attribute.extend([h.make_attribute("min", lo), h.make_attribute("max", hi)])
    used = {i for n in g.node for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    m.opset_import[0].version = 9
    onnx.checker.check_model(m)
    onnx.save(m, path(f"{name}9.onnx"))
    for part in ["calib", "eval"]:
        np.savez(path(f"{name}9.{part}.npz"), x=np.load(path(f"{name}.{part}.npz"))["x"])


mobilenet()
vit()
odd()
for name, shape in [("mobilenet", (64, 3, 64, 64)), ("vit", (64, 16, 64)), ("odd", (64, 4, 32))]:
    for part, seed in [("calib", 1), ("eval", 2)]:
        r = np.random.default_rng(seed)
        a = r.normal(0, 1, shape).astype(np.float32)
        if name == "mobilenet":
            a = np.abs(a)
        np.savez(path(f"{name}.{part}.npz"), x=a)
dense()
half("mobilenet")
half("vit")
opset9("mobilenet")

//! qdq-studio's `ErrorSums` operator in a real ONNX Runtime session: reading a Q/DQ pair's
//! integer output and dequantizing it itself gives the same sums as reading ONNX Runtime's
//! own DequantizeLinear output, for every integer type it reads, and both equal the sums
//! taken here from the session's float tensors.

use crate::common;

use ndarray::{ArrayD, IxDyn};
use qdq_studio::eval::tensor_error::error_sums;
use qdq_studio::model::{DataType, ModelBuilder, TensorArray};
use qdq_studio::runtime::value::{owned_inputs, session_inputs};
use qdq_studio::runtime::{EpSpec, SessionOptions};

/// Registers the operators' domain once for the process before any test opens a session
/// with it: two sessions registering it at once fail ([`error_sums::register`]).
fn registered(runtime: &qdq_studio::runtime::Runtime) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| error_sums::register(runtime).expect("registers"));
}

/// Values spread past every type's range below (some clip), 50,000 of them so that several
/// chunks and a remainder are summed.
fn values() -> ArrayD<f32> {
    let n = 50_003;
    let values = (0..n).map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0);
    ArrayD::from_shape_vec(IxDyn(&[1, n]), values.map(|v| v * v * v * 40.0).collect()).unwrap()
}

/// A scalar initializer of `dtype` holding `value`.
fn zero_point(dtype: DataType, value: i32) -> TensorArray {
    fn scalar<T: Clone>(v: T) -> ArrayD<T> {
        ArrayD::from_elem(IxDyn(&[]), v)
    }
    match dtype {
        DataType::Uint8 => TensorArray::Uint8(scalar(value as u8)),
        DataType::Int8 => TensorArray::Int8(scalar(value as i8)),
        DataType::Uint16 => TensorArray::Uint16(scalar(value as u16)),
        DataType::Int16 => TensorArray::Int16(scalar(value as i16)),
        other => panic!("no zero point of {other:?} here"),
    }
}

/// The integer types the operators read, each with a scale and zero point.
const CASES: [(DataType, f32, i32); 4] = [
    (DataType::Uint8, 0.05, 128),
    (DataType::Int8, 0.07, -5),
    (DataType::Uint16, 0.0004, 30_000),
    (DataType::Int16, 0.0011, 7),
];

/// A model importing the operators' domain that quantizes its input `x` (`[1, ?]`) to `q`
/// of `dtype` by the initializers `scale` and `zero`.
fn quantizing(dtype: DataType, scale: f32, zero: i32) -> ModelBuilder {
    let mut b = ModelBuilder::new(21);
    b.import(error_sums::DOMAIN, 1);
    b.input("x", DataType::Float32, &[1, -1]);
    b.initializer(
        "scale",
        TensorArray::Float32(ArrayD::from_elem(IxDyn(&[]), scale)),
    );
    b.initializer("zero", zero_point(dtype, zero));
    b.node("QuantizeLinear", &["x", "scale", "zero"], &["q"]);
    b
}

/// A CPU session of the model `b` builds, with the operators registered.
fn session(runtime: &qdq_studio::runtime::Runtime, b: ModelBuilder) -> ort::session::Session {
    let model = b.build().to_session_model().unwrap();
    let domain = error_sums::domain().unwrap();
    runtime
        .session_with_operators(&model, &[EpSpec::Cpu], SessionOptions::default(), domain)
        .unwrap()
}

/// `[Σ x², Σ (x − l)²]` from the session's own tensors.
fn expected(x: &ArrayD<f32>, local: &ArrayD<f32>) -> [f64; 2] {
    x.iter().zip(local).fold([0.0; 2], |[s, n], (&x, &l)| {
        let d = f64::from(x - l);
        [s + f64::from(x) * f64::from(x), n + d * d]
    })
}

#[test]
fn integer_local_values_give_the_sums_of_onnx_runtimes_dequantized_ones() {
    let runtime = common::runtime();
    registered(&runtime);
    for (dtype, scale, zero) in CASES {
        let mut b = quantizing(dtype, scale, zero);
        b.node("DequantizeLinear", &["q", "scale", "zero"], &["l"]);
        b.node(
            error_sums::OP,
            &["x", "q", "scale", "zero"],
            &["from_integers"],
        )
        .domain(error_sums::DOMAIN);
        b.node(error_sums::OP, &["x", "l"], &["from_floats"])
            .domain(error_sums::DOMAIN);
        for output in ["from_integers", "from_floats"] {
            b.output(output, DataType::Float64, &[2]);
        }
        b.output("l", DataType::Float32, &[1, -1]);
        let mut session = session(&runtime, b);
        // An empty tensor sums to nothing rather than failing the run.
        let empty = ArrayD::<f32>::zeros(IxDyn(&[1, 0]));
        let owned = owned_inputs(vec![("x".into(), TensorArray::Float32(empty))]).unwrap();
        let out = session.run(session_inputs(&owned)).unwrap();
        for name in ["from_integers", "from_floats"] {
            let (_, pair) = out[name].try_extract_tensor::<f64>().unwrap();
            assert_eq!(pair, [0.0, 0.0], "{dtype:?}: {name} on no values");
        }
        drop(out);
        let x = values();
        let owned = owned_inputs(vec![("x".into(), TensorArray::Float32(x.clone()))]).unwrap();
        let out = session.run(session_inputs(&owned)).unwrap();
        let pair =
            |name: &str| -> Vec<f64> { out[name].try_extract_tensor::<f64>().unwrap().1.to_vec() };
        let local = out["l"].try_extract_array::<f32>().unwrap().to_owned();
        let [signal, noise] = expected(&x, &local);
        assert_eq!(pair("from_integers"), pair("from_floats"), "{dtype:?}");
        let from_integers = pair("from_integers");
        assert!(noise > 0.0, "{dtype:?}: the case must quantize with error");
        assert!(
            (from_integers[0] - signal).abs() <= 1e-5 * signal,
            "{dtype:?}: signal {} against {signal}",
            from_integers[0]
        );
        assert!(
            (from_integers[1] - noise).abs() <= 1e-5 * noise,
            "{dtype:?}: noise {} against {noise}",
            from_integers[1]
        );
    }
}

/// Values at ties `(k + ½) × scale` and one float either side of each, where rounding
/// `x / scale` to an integer is decided by the last bit of the quotient.
fn ties(scale: f32) -> Vec<f32> {
    (-3_000..3_000)
        .flat_map(|k| {
            let tie = (k as f32 + 0.5) * scale * 7.0;
            [tie.next_down(), tie, tie.next_up()]
        })
        .collect()
}

#[test]
fn the_quantizing_twins_write_onnx_runtimes_quantizelinear_output_bit_for_bit() {
    let runtime = common::runtime();
    registered(&runtime);
    for (dtype, scale, zero) in CASES {
        let twin = error_sums::quantizing_op(dtype).expect("a twin for every integer type");
        // The input's dimension has no known size or name: the twin's output is unshaped.
        let mut b = quantizing(dtype, scale, zero);
        b.node(error_sums::OP, &["x", "q", "scale", "zero"], &["sums"])
            .domain(error_sums::DOMAIN);
        b.node(twin, &["x", "q", "scale", "zero"], &["twin_sums", "twin_q"])
            .domain(error_sums::DOMAIN);
        // ONNX Runtime's own kernel reads the twin's output, as the copies do.
        b.node(
            "DequantizeLinear",
            &["twin_q", "scale", "zero"],
            &["twin_l"],
        );
        b.node("DequantizeLinear", &["q", "scale", "zero"], &["l"]);
        for output in ["sums", "twin_sums"] {
            b.output(output, DataType::Float64, &[2]);
        }
        b.output("q", dtype, &[1, -1]);
        b.output("twin_q", dtype, &[1, -1]);
        b.output("l", DataType::Float32, &[1, -1]);
        b.output("twin_l", DataType::Float32, &[1, -1]);
        let mut session = session(&runtime, b);
        let finite: Vec<f32> = values().iter().copied().chain(ties(scale)).collect();
        let special = vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            1e-45,
            3e38,
        ];
        for (i, x) in [finite, special].into_iter().enumerate() {
            let x = ArrayD::from_shape_vec(IxDyn(&[1, x.len()]), x).unwrap();
            let owned = owned_inputs(vec![("x".into(), TensorArray::Float32(x))]).unwrap();
            let out = session.run(session_inputs(&owned)).unwrap();
            let bits = |name: &str| -> Vec<u32> {
                let (_, v) = out[name].try_extract_tensor::<f32>().unwrap();
                v.iter().map(|v| v.to_bits()).collect()
            };
            assert_eq!(bits("l"), bits("twin_l"), "{dtype:?}: the integers differ");
            if i == 0 {
                let pair = |name: &str| out[name].try_extract_tensor::<f64>().unwrap().1.to_vec();
                assert_eq!(pair("sums"), pair("twin_sums"), "{dtype:?}");
            }
        }
    }
}

//! `ErrorSums`: the one operator qdq-studio adds to ONNX Runtime, so that the local-error
//! model ([`crate::eval::tensor_error::local_error`]) sums each tensor's error in one pass.
//!
//! Written with ONNX Runtime's own operators, each measured tensor cost a DequantizeLinear of
//! the copy's 8-bit output, a Sub and two ReduceSumSquare: five passes over float tensors,
//! four of them written or read at 4 bytes an element, and half of the local model's time on
//! PP-OCR rec (its 339 tensors hold 45 M values a sample). This operator reads the float
//! tensor and the copy's output, integer or float, once each, dequantizes on the fly exactly
//! as DequantizeLinear does (`(q − zero_point) as f32 × scale`), and sums Σ float² and
//! Σ (float − local)² ([`squared_sums`]), split into fixed chunks on ONNX Runtime's own
//! threads and added in chunk order, so the figures do not depend on the thread count.
//!
//! Inputs: the float tensor (float32), then the local value, either float32 of the same
//! shape, or an 8- or 16-bit integer tensor followed by its scale (a float32 scalar) and
//! optionally its zero point (a scalar of its type). Output: a float64 pair `[Σ float²,
//! Σ (float − local)²]`.
//!
//! Its twins `ErrorSumsAndQuantize…`, one per integer type ([`quantizing_op`]), take an
//! integer local value of their type only and have a second output: the float tensor
//! quantized by that same scale and zero point, as a QuantizeLinear node would
//! ([`crate::eval::simd::quantize_linear`]). The local model's copies of the nodes reading the tensor
//! take their input from it, so the tensor is read once for both rather than once more by a
//! QuantizeLinear of its own. The type is in the operator rather than inferred: ONNX Runtime
//! types a custom operator's outputs from its declaration, and the shape inference that
//! could type it cannot tell a tensor of unknown rank from a scalar.

use std::sync::Mutex;

use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorDomain, OperatorInput,
    OperatorOutput, ShapeInferenceContext,
};
use ort::value::{TensorElementType, ValueRef, ValueType};

use crate::eval::simd::quantize_linear::{QuantizedInt, quantize_linear};
use crate::eval::simd::squares::{BLOCK, squared_sums, squared_sums_onto};
use crate::model::DataType;
use crate::model::builder::ModelBuilder;
use crate::runtime::{EpSpec, Optimization, Runtime, RuntimeError, SessionOptions};

/// The domain of qdq-studio's operator.
pub const DOMAIN: &str = "ai.qdq_studio";

/// The operator's name.
pub const OP: &str = "ErrorSums";

/// Its twins that also quantize the float tensor (see the module docs): name and integer
/// type, as the model states it and as the operator declares it.
const QUANTIZING: [(&str, DataType, TensorElementType); 4] = [
    (
        "ErrorSumsAndQuantizeU8",
        DataType::Uint8,
        TensorElementType::Uint8,
    ),
    (
        "ErrorSumsAndQuantizeI8",
        DataType::Int8,
        TensorElementType::Int8,
    ),
    (
        "ErrorSumsAndQuantizeU16",
        DataType::Uint16,
        TensorElementType::Uint16,
    ),
    (
        "ErrorSumsAndQuantizeI16",
        DataType::Int16,
        TensorElementType::Int16,
    ),
];

/// The twin of `ErrorSums` that also quantizes the float tensor to `integer` (see the module
/// docs), if there is one for that type.
pub fn quantizing_op(integer: DataType) -> Option<&'static str> {
    QUANTIZING
        .iter()
        .find(|(_, t, _)| *t == integer)
        .map(|(name, ..)| *name)
}

/// Values per chunk a thread sums at once: large enough that scheduling is noise, small
/// enough that the 2 to 16 threads of a workstation share a 60 K-value tensor.
const CHUNK: usize = 1 << 14;

/// Values of a chunk `ErrorSumsAndQuantize` quantizes and then sums at once: 16 KB of float
/// values, which stay in the first-level cache between the two, and whole blocks of the sums
/// ([`BLOCK`]), so that the sums are those of one pass over the chunk, bit for bit.
const PIECE: usize = 16 * BLOCK;

/// The operator domain to register on a session whose model uses `ErrorSums`.
pub fn domain() -> ort::Result<OperatorDomain> {
    QUANTIZING.iter().try_fold(
        OperatorDomain::new(DOMAIN)?.add(ErrorSums)?,
        |domain, &(name, _, integer)| domain.add(ErrorSumsAndQuantize { name, integer }),
    )
}

/// Registers the operator's domain in ONNX Runtime's process-wide table by opening a
/// session of a one-node model with it. A session registers the domain of its custom
/// operators when it opens, and two sessions that are the first to register one, opened at
/// once, fail ("the domain is already exist", seen when the local-error sessions of a new
/// process opened side by side); once it is there, sessions may open side by side. Costs
/// a few milliseconds.
pub fn register(runtime: &Runtime) -> Result<(), crate::eval::compare::EvalError> {
    let mut builder = ModelBuilder::new(13);
    builder
        .input("x", DataType::Float32, &[1])
        .output("y", DataType::Float32, &[1]);
    builder.node("Identity", &["x"], &["y"]);
    let encoded = builder.build().to_session_model()?;
    let options = SessionOptions {
        optimization: Optimization::Disable,
        arena: false,
        ..SessionOptions::default()
    };
    let domain = domain().map_err(RuntimeError::from)?;
    runtime.session_with_operators(&encoded, &[EpSpec::Cpu], options, domain)?;
    Ok(())
}

/// The `ErrorSums` operator (see the module docs).
struct ErrorSums;

impl Operator for ErrorSums {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        OP
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        // The local value and what dequantizes it differ in type: one heterogeneous list.
        [
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::variadic(1),
        ]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Float64)]
    }

    fn create_kernel<'attr>(&self, _: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        Ok(Box::new(compute))
    }
}

/// An `ErrorSumsAndQuantize…` operator (see the module docs).
struct ErrorSumsAndQuantize {
    name: &'static str,
    /// The type of the local value and of the quantized output.
    integer: TensorElementType,
}

impl Operator for ErrorSumsAndQuantize {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        self.name
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        ErrorSums.inputs()
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [
            OperatorOutput::required(TensorElementType::Float64),
            OperatorOutput::required(self.integer),
        ]
    }

    /// The quantized output has the float tensor's shape, when its rank and each dimension
    /// are known, as a number or a name. Otherwise its shape is left unknown: an unknown
    /// rank reads as no dimension (a scalar's) and an unknown dimension as -1, which would
    /// be taken as their values.
    fn infer_shape(&self, ctx: &mut ShapeInferenceContext) -> ort::Result<()> {
        let inputs = ctx.inputs();
        if let Some(ValueType::Tensor {
            shape,
            dimension_symbols,
            ..
        }) = inputs.first()
            && !shape.is_empty()
            && shape
                .iter()
                .enumerate()
                .all(|(i, &d)| d >= 0 || dimension_symbols.get(i).is_some_and(|s| !s.is_empty()))
        {
            let quantized = ValueType::Tensor {
                ty: self.integer,
                shape: shape.clone(),
                dimension_symbols: dimension_symbols.clone(),
            };
            ctx.set_output(1, &quantized)?;
        }
        Ok(())
    }

    fn create_kernel<'attr>(&self, _: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        Ok(Box::new(compute))
    }
}

/// One run of the kernel: reads the inputs, sums, writes the pair.
fn compute(ctx: &ComputeContext) -> ort::Result<()> {
    let reference = required(ctx, 0)?;
    let (shape, float) = reference.try_extract_tensor::<f32>()?;
    let local = required(ctx, 1)?;
    let sums = match local.try_extract_tensor::<f32>() {
        Ok(_) if ctx.num_outputs()? > 1 => {
            return Err(ort::Error::new(
                "ErrorSumsAndQuantize: the local value must be an integer tensor",
            ));
        }
        Ok((_, local)) => {
            same_length(float, local)?;
            chunked_sums(ctx, float.len(), |range| {
                squared_sums(&float[range.clone()], &local[range], |l| l)
            })?
        }
        Err(_) => quantized_sums(ctx, (float, shape), &local)?,
    };
    let mut output = ctx
        .output(0, vec![2_i64])?
        .ok_or_else(|| ort::Error::new("ErrorSums: no output to write"))?;
    let (_, pair) = output.try_extract_tensor_mut::<f64>()?;
    pair.copy_from_slice(&sums);
    Ok(())
}

/// The sums against an integer local value, dequantized by inputs 2 (scale) and 3 (zero
/// point, 0 when absent); `float` is the float tensor's values and shape.
fn quantized_sums(
    ctx: &ComputeContext,
    float: (&[f32], &ort::value::Shape),
    local: &ValueRef,
) -> ort::Result<[f64; 2]> {
    let (float, shape) = float;
    let scale = required(ctx, 2)?;
    let (_, scale) = scale.try_extract_tensor::<f32>()?;
    let &[scale] = scale else {
        return Err(ort::Error::new(
            "ErrorSums: the scale of an integer local value must be one value",
        ));
    };
    let zero_point = match ctx.num_inputs()? > 3 {
        true => ctx.input(3)?,
        false => None,
    };
    macro_rules! dequantized {
        ($($t:ty),*) => {$(
            if let Ok((_, q)) = local.try_extract_tensor::<$t>() {
                same_length(float, q)?;
                let zero = match &zero_point {
                    Some(z) => one(z.try_extract_tensor::<$t>()?.1)?,
                    None => 0,
                };
                let by = Quantization { scale, zero: i32::from(zero) };
                return match ctx.num_outputs()? > 1 {
                    true => sums_and_quantized::<$t>(ctx, (float, shape), q, by),
                    false => chunked_sums(ctx, float.len(), |range| {
                        squared_sums(&float[range.clone()], &q[range], |q| by.dequantized(q))
                    }),
                };
            }
        )*};
    }
    dequantized!(u8, i8, u16, i16);
    Err(ort::Error::new(
        "ErrorSums: the local value must be float32 or an 8- or 16-bit integer",
    ))
}

/// The scale and zero point of an integer local value.
#[derive(Clone, Copy)]
struct Quantization {
    scale: f32,
    zero: i32,
}

impl Quantization {
    /// The value `q` stands for, as DequantizeLinear computes it: the arithmetic of
    /// [`crate::quant::scale::dequantize`], in i32 rather than its i64, as AVX2 converts
    /// packed i32 to float32 and has no such conversion from i64 (this runs per value in the
    /// sums' inner loop).
    fn dequantized<T: Into<i32>>(self, q: T) -> f32 {
        (q.into() - self.zero) as f32 * self.scale
    }
}

/// [`quantized_sums`] of `ErrorSumsAndQuantize`: the float tensor is also quantized `by` the
/// local value's scale and zero point into output 1, chunk by chunk as it is summed (each
/// chunk read once from memory for both).
fn sums_and_quantized<T>(
    ctx: &ComputeContext,
    float: (&[f32], &ort::value::Shape),
    local: &[T],
    by: Quantization,
) -> ort::Result<[f64; 2]>
where
    T: QuantizedInt + Into<i32> + ort::value::PrimitiveTensorElementType,
{
    let (float, shape) = float;
    let mut output = ctx
        .output(1, shape.to_vec())?
        .ok_or_else(|| ort::Error::new("ErrorSumsAndQuantize: no quantized output to write"))?;
    let (_, quantized) = output.try_extract_tensor_mut::<T>()?;
    // Each chunk's part of the output, written by whichever thread sums the chunk.
    let parts: Vec<Mutex<&mut [T]>> = quantized.chunks_mut(CHUNK).map(Mutex::new).collect();
    chunked_sums(ctx, float.len(), |range| {
        let Some(Ok(mut part)) = parts.get(range.start / CHUNK).map(|p| p.lock()) else {
            return [f64::NAN; 2];
        };
        // Each piece is quantized, then summed while it is still in the first-level cache.
        let pieces = float[range.clone()]
            .chunks(PIECE)
            .zip(local[range].chunks(PIECE))
            .zip(part.chunks_mut(PIECE));
        pieces.fold([0.0; 2], |totals, ((values, local), quantized)| {
            quantize_linear(values, quantized, by.scale, by.zero);
            squared_sums_onto(totals, values, local, |q| by.dequantized(q))
        })
    })
}

/// Input `index`, which the graph must give.
fn required(ctx: &ComputeContext, index: usize) -> ort::Result<ValueRef<'_>> {
    ctx.input(index)?
        .ok_or_else(|| ort::Error::new(format!("ErrorSums: input {index} is missing")))
}

/// The one value of a scalar zero point.
fn one<T: Copy>(values: &[T]) -> ort::Result<T> {
    match values {
        [value] => Ok(*value),
        _ => Err(ort::Error::new(
            "ErrorSums: the zero point of an integer local value must be one value",
        )),
    }
}

/// Fails unless the local value has as many elements as the float tensor.
fn same_length<T>(float: &[f32], local: &[T]) -> ort::Result<()> {
    match float.len() == local.len() {
        true => Ok(()),
        false => Err(ort::Error::new(format!(
            "ErrorSums: the float tensor has {} values and the local one {}",
            float.len(),
            local.len()
        ))),
    }
}

/// `[Σ float², Σ (float − local)²]` over `len` values: `sums` of each chunk of [`CHUNK`]
/// values on ONNX Runtime's threads, added in chunk order.
fn chunked_sums(
    ctx: &ComputeContext,
    len: usize,
    sums: impl Fn(std::ops::Range<usize>) -> [f64; 2] + Sync + Send,
) -> ort::Result<[f64; 2]> {
    let chunks = len.div_ceil(CHUNK);
    if chunks == 0 {
        // An empty tensor (a batch with a zero-sized axis): nothing to sum, nothing to split.
        return Ok([0.0; 2]);
    }
    let partial = Mutex::new(vec![[0.0; 2]; chunks]);
    ctx.par_for(chunks, chunks, |chunk| {
        let start = chunk * CHUNK;
        let value = sums(start..(start + CHUNK).min(len));
        if let Ok(mut partial) = partial.lock() {
            partial[chunk] = value;
        }
    })?;
    let partial = partial
        .into_inner()
        .map_err(|_| ort::Error::new("ErrorSums: a thread failed while summing"))?;
    Ok(partial
        .iter()
        .fold([0.0; 2], |[s, n], [ps, pn]| [s + ps, n + pn]))
}

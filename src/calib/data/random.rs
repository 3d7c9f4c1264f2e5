//! Random calibration data from the model's input specs (what ModelOpt does when no data is
//! given). Useful to exercise a pipeline; ranges from random data are not representative.

use std::collections::BTreeMap;

use half::f16;
use ndarray::{ArrayD, Dimension, IxDyn};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::roles::{self, InputRole};
use super::{ArraySpec, Batch, BatchCursor, BatchSource, DataError, InputSpec};
use crate::model::{DataType, Dim, TensorArray};

/// Generates batches: uniform values for plain inputs (floats in [0, 1), integers in
/// [0, 100), random bools) and, for a token model, data its inputs accept (see [`roles`]).
#[derive(Debug)]
pub struct RandomSource {
    arrays: Vec<ArraySpec>,
    roles: Vec<InputRole>,
    samples: usize,
    seed: u64,
    rng: SmallRng,
    cursor: BatchCursor,
}

impl RandomSource {
    /// Random data for `inputs`; symbolic dims must be given in `shapes` (batch included; the
    /// batch dimension is then replaced by the sample count), except in a token model, whose
    /// sequence axes get [`roles::sequence_length`] and whose past keys/values are empty.
    pub fn new(
        inputs: &[InputSpec],
        shapes: &BTreeMap<String, Vec<usize>>,
        samples: usize,
        seed: u64,
    ) -> Result<Self, DataError> {
        let defaults = default_shapes(inputs);
        let mut problems = Vec::new();
        let mut arrays = Vec::new();
        let mut roles = Vec::new();
        for input in inputs {
            let shape = shapes
                .get(&input.name)
                .or_else(|| defaults.get(&input.name))
                .cloned();
            match shape {
                Some(mut shape) => {
                    match shape.first_mut() {
                        Some(batch) => *batch = samples,
                        None => shape = vec![samples],
                    }
                    arrays.push(ArraySpec {
                        name: input.name.clone(),
                        dtype: input.dtype.unwrap_or(DataType::Float32),
                        shape,
                    });
                    roles.push(input.role);
                }
                None => problems.push(format!(
                    "input '{}' has symbolic dimensions; give its shape with --calibration_shapes {}:AxBx...",
                    input.name, input.name
                )),
            }
        }
        if !problems.is_empty() {
            return Err(DataError::Mismatch { problems });
        }
        Ok(RandomSource {
            arrays,
            roles,
            samples,
            seed,
            rng: SmallRng::seed_from_u64(seed),
            cursor: BatchCursor::default(),
        })
    }
}

/// The shape random data gives each input that needs no user-given shape: fixed dims kept and
/// a symbolic batch axis 1; in a token model every other symbolic axis too (see
/// [`roles::token_shape`]). Inputs missing here need a shape from the user.
pub fn default_shapes(inputs: &[InputSpec]) -> BTreeMap<String, Vec<usize>> {
    let token_model = roles::is_token_model(inputs);
    let sequence = roles::SequenceBounds::of_inputs(inputs).default_length();
    let mut shapes = BTreeMap::new();
    for input in inputs {
        let Some(dims) = &input.shape else {
            continue;
        };
        let shape = if token_model {
            roles::token_shape(input.role, dims, sequence)
        } else {
            filled(dims, |_| None)
        };
        if let Some(shape) = shape {
            shapes.insert(input.name.clone(), shape);
        }
    }
    shapes
}

/// A shape for every input with a declared shape, for a face to offer the user to edit:
/// [`default_shapes`] where it has one, else 224 on the spatial axes of a rank-4 input (the
/// common NCHW image) and 32 on other symbolic axes.
pub fn suggested_shapes(inputs: &[InputSpec]) -> BTreeMap<String, Vec<usize>> {
    let mut shapes = default_shapes(inputs);
    for input in inputs {
        let Some(dims) = &input.shape else {
            continue;
        };
        let spatial = |axis: usize| dims.len() == 4 && axis >= 2;
        let guess = filled(dims, |axis| Some(if spatial(axis) { 224 } else { 32 }));
        if let (false, Some(guess)) = (shapes.contains_key(&input.name), guess) {
            shapes.insert(input.name.clone(), guess);
        }
    }
    shapes
}

/// `dims` made concrete: fixed dims kept, a symbolic batch axis 1, any other symbolic axis
/// what `symbolic(axis)` gives (`None` when it gives none).
fn filled(dims: &[Dim], symbolic: impl Fn(usize) -> Option<usize>) -> Option<Vec<usize>> {
    dims.iter()
        .enumerate()
        .map(|(axis, d)| match d {
            Dim::Fixed(v) if *v >= 0 => Some(*v as usize),
            _ if axis == 0 => Some(1),
            _ => symbolic(axis),
        })
        .collect()
}

impl BatchSource for RandomSource {
    fn describe(&self) -> String {
        format!("random data ({} samples, seed {})", self.samples, self.seed)
    }

    fn arrays(&self) -> Vec<ArraySpec> {
        self.arrays.clone()
    }

    fn samples(&self) -> usize {
        self.samples
    }

    fn rewind(&mut self) -> Result<(), DataError> {
        self.rng = SmallRng::seed_from_u64(self.seed);
        self.cursor.reset();
        Ok(())
    }

    fn next_batch(&mut self, max_samples: usize) -> Result<Option<Batch>, DataError> {
        let Some((index, first_sample, count)) = self.cursor.claim(max_samples, self.samples)
        else {
            return Ok(None);
        };
        let rng = &mut self.rng;
        let inputs = self
            .arrays
            .iter()
            .zip(&self.roles)
            .map(|(spec, role)| {
                let mut shape = spec.shape.clone();
                shape[0] = count;
                (spec.name.clone(), generate(spec.dtype, &shape, *role, rng))
            })
            .collect();
        let batch = Batch {
            index,
            first_sample,
            samples: count,
            inputs,
        };
        Ok(Some(batch))
    }
}

/// One array of `shape` for an input of `role`.
fn generate(dtype: DataType, shape: &[usize], role: InputRole, rng: &mut SmallRng) -> TensorArray {
    match role {
        InputRole::Values => uniform(dtype, IxDyn(shape), rng),
        InputRole::TokenIds { vocab } => {
            let vocab = vocab.unwrap_or(roles::UNKNOWN_VOCAB) as i64;
            counted(dtype, IxDyn(shape), |_| rng.random_range(0..vocab))
        }
        _ => role_values(dtype, shape, role),
    }
}

/// What an input of `role` takes whatever the tokens: an attention mask of ones, position ids
/// counting from 0 along the last axis, zeros for token types and past keys/values (zeros too
/// for ids and plain values, which the callers fill themselves).
pub(super) fn role_values(dtype: DataType, shape: &[usize], role: InputRole) -> TensorArray {
    let shape = IxDyn(shape);
    match role {
        InputRole::AttentionMask => counted(dtype, shape, |_| 1),
        InputRole::PositionIds { .. } => {
            counted(dtype, shape, |index| index.last().map_or(0, |&i| i as i64))
        }
        _ => counted(dtype, shape, |_| 0),
    }
}

/// An array of `dtype` whose element at each index is `value(index)`.
fn counted(dtype: DataType, shape: IxDyn, mut value: impl FnMut(&[usize]) -> i64) -> TensorArray {
    let mut at = |index: IxDyn| value(index.slice());
    match dtype {
        DataType::Int64 => TensorArray::Int64(ArrayD::from_shape_fn(shape, at)),
        DataType::Int32 => TensorArray::Int32(ArrayD::from_shape_fn(shape, |i| at(i) as i32)),
        DataType::Bool => TensorArray::Bool(ArrayD::from_shape_fn(shape, |i| at(i) != 0)),
        DataType::Float16 => {
            TensorArray::Float16(ArrayD::from_shape_fn(
                shape,
                |i| f16::from_f32(at(i) as f32),
            ))
        }
        DataType::Float64 => TensorArray::Float64(ArrayD::from_shape_fn(shape, |i| at(i) as f64)),
        _ => TensorArray::Float32(ArrayD::from_shape_fn(shape, |i| at(i) as f32)),
    }
}

/// Uniform values: floats in [0, 1), integers in [0, 100), random bools.
fn uniform(dtype: DataType, shape: IxDyn, rng: &mut SmallRng) -> TensorArray {
    match dtype {
        DataType::Float16 => TensorArray::Float16(ArrayD::from_shape_simple_fn(shape, || {
            f16::from_f32(rng.random())
        })),
        DataType::Float64 => {
            TensorArray::Float64(ArrayD::from_shape_simple_fn(shape, || rng.random()))
        }
        DataType::Int64 => TensorArray::Int64(ArrayD::from_shape_simple_fn(shape, || {
            rng.random_range(0..100)
        })),
        DataType::Int32 => TensorArray::Int32(ArrayD::from_shape_simple_fn(shape, || {
            rng.random_range(0..100)
        })),
        DataType::Bool => TensorArray::Bool(ArrayD::from_shape_simple_fn(shape, || rng.random())),
        _ => TensorArray::Float32(ArrayD::from_shape_simple_fn(shape, || rng.random())),
    }
}

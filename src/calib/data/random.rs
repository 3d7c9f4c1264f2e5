//! Random calibration data from the model's input specs (what ModelOpt does when no data is
//! given). Useful to exercise a pipeline; ranges from random data are not representative.

use std::collections::BTreeMap;

use half::f16;
use ndarray::{ArrayD, IxDyn};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{ArraySpec, Batch, BatchCursor, BatchSource, DataError, InputSpec};
use crate::model::{DataType, Dim, TensorArray};

/// Generates batches of uniform values: floats in [0, 1), integers in [0, 100), random bools.
#[derive(Debug)]
pub struct RandomSource {
    arrays: Vec<ArraySpec>,
    samples: usize,
    seed: u64,
    rng: SmallRng,
    cursor: BatchCursor,
}

impl RandomSource {
    /// Random data for `inputs`; symbolic dims must be given in `shapes` (batch included; the
    /// batch dimension is then replaced by the sample count).
    pub fn new(
        inputs: &[InputSpec],
        shapes: &BTreeMap<String, Vec<usize>>,
        samples: usize,
        seed: u64,
    ) -> Result<Self, DataError> {
        let mut problems = Vec::new();
        let mut arrays = Vec::new();
        for input in inputs {
            let dtype = input.dtype.unwrap_or(DataType::Float32);
            let shape: Option<Vec<usize>> = match (shapes.get(&input.name), &input.shape) {
                (Some(given), _) => Some(given.clone()),
                (None, Some(dims)) => dims
                    .iter()
                    .enumerate()
                    .map(|(axis, d)| match d {
                        Dim::Fixed(v) if *v >= 0 => Some(*v as usize),
                        _ if axis == 0 => Some(1),
                        _ => None,
                    })
                    .collect(),
                (None, None) => None,
            };
            match shape {
                Some(mut shape) if !shape.is_empty() => {
                    shape[0] = samples;
                    arrays.push(ArraySpec {
                        name: input.name.clone(),
                        dtype,
                        shape,
                    });
                }
                Some(_) => arrays.push(ArraySpec {
                    name: input.name.clone(),
                    dtype,
                    shape: vec![samples],
                }),
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
            samples,
            seed,
            rng: SmallRng::seed_from_u64(seed),
            cursor: BatchCursor::default(),
        })
    }
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
            .map(|spec| {
                let mut shape = spec.shape.clone();
                shape[0] = count;
                let n: usize = shape.iter().product();
                let shape = IxDyn(&shape);
                let array = match spec.dtype {
                    DataType::Float16 => {
                        TensorArray::Float16(ArrayD::from_shape_simple_fn(shape, || {
                            f16::from_f32(rng.random())
                        }))
                    }
                    DataType::Float64 => {
                        TensorArray::Float64(ArrayD::from_shape_simple_fn(shape, || rng.random()))
                    }
                    DataType::Int64 => {
                        TensorArray::Int64(ArrayD::from_shape_simple_fn(shape, || {
                            rng.random_range(0..100)
                        }))
                    }
                    DataType::Int32 => {
                        TensorArray::Int32(ArrayD::from_shape_simple_fn(shape, || {
                            rng.random_range(0..100)
                        }))
                    }
                    DataType::Bool => {
                        TensorArray::Bool(ArrayD::from_shape_simple_fn(shape, || rng.random()))
                    }
                    _ => TensorArray::Float32(ArrayD::from_shape_simple_fn(shape, || rng.random())),
                };
                debug_assert_eq!(array.len(), n);
                (spec.name.clone(), array)
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

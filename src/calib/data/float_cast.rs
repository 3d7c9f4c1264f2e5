//! Float data for a model of another float precision: float32 images or arrays (numpy's
//! float64 by default) feeding a float16 model, and the reverse, are converted batch by
//! batch to the type the model declares, as users expect of a tool that takes their data
//! files as they are. Integer and boolean data is never converted (a wrong integer type is
//! a mistake the data check names).

use std::collections::BTreeMap;

use super::{ArraySpec, Batch, BatchSource, DataError, InputSpec};
use crate::model::DataType;

/// A source whose float arrays are converted to the float type of the input they feed.
pub struct FloatCast {
    inner: Box<dyn BatchSource>,
    /// Input name → (the data's type, the model's).
    casts: BTreeMap<String, (DataType, DataType)>,
}

impl FloatCast {
    /// Wraps `inner` when some of its float arrays differ in type from the float input they
    /// feed; returns it unchanged otherwise.
    pub fn wrap(inner: Box<dyn BatchSource>, inputs: &[InputSpec]) -> Box<dyn BatchSource> {
        let arrays = inner.arrays();
        let casts: BTreeMap<String, (DataType, DataType)> = inputs
            .iter()
            .filter_map(|input| {
                let want = input.dtype.filter(|t| t.is_plain_float())?;
                let have = arrays.iter().find(|a| a.name == input.name)?.dtype;
                (have.is_plain_float() && have != want).then(|| (input.name.clone(), (have, want)))
            })
            .collect();
        if casts.is_empty() {
            inner
        } else {
            Box::new(FloatCast { inner, casts })
        }
    }
}

impl BatchSource for FloatCast {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn notes(&self) -> Vec<String> {
        self.casts
            .iter()
            .map(|(name, (from, to))| {
                format!("'{name}': {from} data converted to the model's {to}")
            })
            .collect()
    }

    fn arrays(&self) -> Vec<ArraySpec> {
        let mut arrays = self.inner.arrays();
        for array in &mut arrays {
            if let Some((_, to)) = self.casts.get(&array.name) {
                array.dtype = *to;
            }
        }
        arrays
    }

    fn samples(&self) -> usize {
        self.inner.samples()
    }

    fn rewind(&mut self) -> Result<(), DataError> {
        self.inner.rewind()
    }

    fn next_batch(&mut self, max_samples: usize) -> Result<Option<Batch>, DataError> {
        let Some(mut batch) = self.inner.next_batch(max_samples)? else {
            return Ok(None);
        };
        for (name, array) in &mut batch.inputs {
            if let Some((_, to)) = self.casts.get(name.as_str()) {
                *array = array.cast_float(*to);
            }
        }
        Ok(Some(batch))
    }

    fn whole_feeds(&self) -> bool {
        self.inner.whole_feeds()
    }
}

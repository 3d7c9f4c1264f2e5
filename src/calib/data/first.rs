//! [`FirstSamples`]: the first samples of another source, for work that needs only a few
//! (the per-tensor errors of quantize & compare).

use super::{ArraySpec, Batch, BatchSource, DataError};

/// The first `limit` samples of another source.
pub struct FirstSamples {
    inner: Box<dyn BatchSource>,
    limit: usize,
    served: usize,
}

impl FirstSamples {
    /// The first `limit` samples of `inner`.
    pub fn new(inner: Box<dyn BatchSource>, limit: usize) -> Self {
        FirstSamples {
            inner,
            limit,
            served: 0,
        }
    }
}

impl BatchSource for FirstSamples {
    fn describe(&self) -> String {
        format!(
            "the first {} samples of {}",
            self.samples(),
            self.inner.describe()
        )
    }

    fn arrays(&self) -> Vec<ArraySpec> {
        let samples = self.samples();
        self.inner
            .arrays()
            .into_iter()
            .map(|mut a| {
                if let Some(first) = a.shape.first_mut() {
                    *first = samples;
                }
                a
            })
            .collect()
    }

    fn samples(&self) -> usize {
        self.inner.samples().min(self.limit)
    }

    fn notes(&self) -> Vec<String> {
        self.inner.notes()
    }

    fn rewind(&mut self) -> Result<(), DataError> {
        self.served = 0;
        self.inner.rewind()
    }

    fn next_batch(&mut self, max_samples: usize) -> Result<Option<Batch>, DataError> {
        let left = self.samples().saturating_sub(self.served);
        if left == 0 {
            return Ok(None);
        }
        let batch = self.inner.next_batch(max_samples.min(left))?;
        if let Some(b) = &batch {
            self.served += b.samples;
        }
        Ok(batch)
    }
}

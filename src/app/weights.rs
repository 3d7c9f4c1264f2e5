//! What the node inspector shows of a weight: its statistics and histogram, computed once per
//! tensor and kept while the model is open.

use crate::calib::histogram::Histogram;
use crate::model::{DataType, Model};

/// Bins of the weight histogram.
const BINS: usize = 128;

/// Statistics of one initializer.
#[derive(Debug, Clone)]
pub struct WeightSummary {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DataType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Smallest value.
    pub min: f32,
    /// Largest value.
    pub max: f32,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub std: f64,
    /// Share of exact zeros.
    pub zeros: f64,
    /// Non-finite values (NaN, ±Inf): a weight with any is a problem worth seeing.
    pub non_finite: usize,
    /// Value histogram over `[-max|x|, max|x|]`.
    pub histogram: Histogram,
}

impl WeightSummary {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True for an empty tensor.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Summarises initializer `name` of `model`; `Ok(None)` when it is not an initializer.
pub fn summarize(
    model: &Model,
    name: &str,
) -> Result<Option<WeightSummary>, crate::model::ModelError> {
    let Some(array) = model.weight(name)? else {
        return Ok(None);
    };
    let dtype = array.dtype();
    let shape = array.shape().to_vec();
    let values = array.to_f32();
    let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
    let (mut sum, mut sum_sq, mut zeros, mut non_finite, mut finite) =
        (0f64, 0f64, 0usize, 0usize, 0usize);
    for &v in &values {
        if !v.is_finite() {
            non_finite += 1;
            continue;
        }
        finite += 1;
        min = min.min(v);
        max = max.max(v);
        sum += f64::from(v);
        sum_sq += f64::from(v) * f64::from(v);
        if v == 0.0 {
            zeros += 1;
        }
    }
    let n = finite.max(1) as f64;
    let mean = sum / n;
    let std = (sum_sq / n - mean * mean).max(0.0).sqrt();
    let abs_max = min.abs().max(max.abs());
    let mut histogram = Histogram::new(BINS);
    if finite > 0 {
        match values.as_slice() {
            Some(slice) => histogram.add(slice, abs_max),
            None => histogram.add(&values.iter().copied().collect::<Vec<_>>(), abs_max),
        }
    } else {
        (min, max) = (0.0, 0.0);
    }
    Ok(Some(WeightSummary {
        name: name.to_owned(),
        dtype,
        shape,
        min,
        max,
        mean,
        std,
        zeros: zeros as f64 / values.len().max(1) as f64,
        non_finite,
        histogram,
    }))
}

/// The weight's histogram as an RGB image (`width` × `height`), drawn by the report's chart
/// function so the studio and the HTML report show the same picture.
pub fn histogram_image(
    summary: &WeightSummary,
    width: u32,
    height: u32,
) -> Result<egui::ColorImage, crate::report::charts::ChartError> {
    let rgb = crate::report::charts::to_rgb(width, height, |area| {
        crate::report::charts::value_histogram(area, &summary.name, &summary.histogram, None, None)
    })?;
    Ok(egui::ColorImage::from_rgb(
        [width as usize, height as usize],
        &rgb,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelBuilder, TensorArray};

    #[test]
    fn statistics_and_histogram_of_an_initializer() {
        let w =
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2, 2]), vec![-1.0f32, 0.0, 0.5, 2.5])
                .unwrap();
        let mut b = ModelBuilder::new(17);
        b.input("x", DataType::Float32, &[1, 2]);
        b.initializer("w", TensorArray::Float32(w));
        b.node("MatMul", &["x", "w"], &["y"]).name("mm");
        b.output("y", DataType::Float32, &[1, 2]);
        let model = b.build();
        let s = summarize(&model, "w").unwrap().unwrap();
        assert_eq!((s.min, s.max), (-1.0, 2.5));
        assert!((s.mean - 0.5).abs() < 1e-9);
        assert_eq!(s.zeros, 0.25);
        assert_eq!(s.len(), 4);
        assert_eq!(s.histogram.total(), 4);
        assert!(
            summarize(&model, "x").unwrap().is_none(),
            "an input is not a weight"
        );
        let image = histogram_image(&s, 320, 160).unwrap();
        assert_eq!(image.size, [320, 160]);
        assert!(
            image.pixels.iter().any(|p| p.b() > 150 && p.r() < 100),
            "the bars are drawn"
        );
    }
}

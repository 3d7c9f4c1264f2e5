//! A folder of images (png/jpg) as calibration data for image models, with the preprocessing
//! the model expects: resize (and optional centre crop), channel order, layout, scale and
//! per-channel mean/std. Images are decoded with the `image` crate, a batch at a time.

use std::path::{Path, PathBuf};

use image::imageops::FilterType;
use ndarray::{Array4, ArrayD};
use serde::{Deserialize, Serialize};

use super::{ArraySpec, Batch, BatchCursor, BatchSource, DataError};
use crate::model::{DataType, TensorArray};

/// Channel order of the model's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ChannelOrder {
    /// Red, green, blue.
    #[default]
    Rgb,
    /// Blue, green, red (OpenCV-trained models).
    Bgr,
}

/// Memory layout of the model's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `[N, C, H, W]`.
    #[default]
    Nchw,
    /// `[N, H, W, C]`.
    Nhwc,
}

/// How images become input tensors: `((pixel * scale) - mean) / std` per channel, after
/// resizing and cropping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preprocess {
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
    /// Resize the shorter side to this, then centre-crop to width × height (0: resize
    /// directly to width × height).
    #[serde(default)]
    pub resize_shorter: u32,
    /// Channel order.
    #[serde(default)]
    pub channels: ChannelOrder,
    /// Layout.
    #[serde(default)]
    pub layout: Layout,
    /// Multiplier applied to 0..255 pixel values first (1/255 maps to 0..1).
    pub scale: f32,
    /// Per-channel mean subtracted after scaling.
    pub mean: [f32; 3],
    /// Per-channel standard deviation divided by last.
    pub std: [f32; 3],
}

impl Default for Preprocess {
    /// ImageNet's usual preprocessing at 224×224.
    fn default() -> Self {
        Preprocess {
            width: 224,
            height: 224,
            resize_shorter: 256,
            channels: ChannelOrder::Rgb,
            layout: Layout::Nchw,
            scale: 1.0 / 255.0,
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
        }
    }
}

/// Image files of a folder, sorted, as a batch source.
#[derive(Debug)]
pub struct ImageFolderSource {
    folder: PathBuf,
    files: Vec<PathBuf>,
    input: String,
    preprocess: Preprocess,
    cursor: BatchCursor,
}

fn is_image(path: &Path) -> bool {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .is_some_and(|e| matches!(e.as_str(), "png" | "jpg" | "jpeg"))
}

impl ImageFolderSource {
    /// Lists the folder. Every regular file must be a png or jpg image: anything else is an
    /// error naming it, so a stray file is never silently skipped.
    pub fn open(folder: &Path, input: &str, preprocess: Preprocess) -> Result<Self, DataError> {
        let open_err = |e: std::io::Error| DataError::Open {
            path: folder.to_path_buf(),
            reason: e.to_string(),
        };
        if preprocess.width == 0 || preprocess.height == 0 || preprocess.std.contains(&0.0) {
            return Err(DataError::Corrupt {
                name: "preprocessing".to_owned(),
                reason: "width, height and every std must be non-zero".to_owned(),
            });
        }
        let mut files = Vec::new();
        for entry in std::fs::read_dir(folder).map_err(open_err)? {
            let path = entry.map_err(open_err)?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !path.is_file() || name.starts_with('.') {
                continue;
            }
            if !is_image(&path) {
                return Err(DataError::Corrupt {
                    name: path.display().to_string(),
                    reason: "not a png or jpg image; the image folder must hold only images"
                        .to_owned(),
                });
            }
            files.push(path);
        }
        files.sort();
        Ok(ImageFolderSource {
            folder: folder.to_path_buf(),
            files,
            input: input.to_owned(),
            preprocess,
            cursor: BatchCursor::default(),
        })
    }

    fn load(&self, path: &Path) -> Result<image::RgbImage, DataError> {
        let corrupt = |reason: String| DataError::Corrupt {
            name: path.display().to_string(),
            reason,
        };
        let image = image::ImageReader::open(path)
            .map_err(|e| corrupt(e.to_string()))?
            .with_guessed_format()
            .map_err(|e| corrupt(e.to_string()))?
            .decode()
            .map_err(|e| corrupt(format!("cannot decode: {e}")))?;
        let p = &self.preprocess;
        let image = if p.resize_shorter > 0 {
            let (w, h) = (image.width().max(1), image.height().max(1));
            let k = p.resize_shorter as f64 / f64::from(w.min(h));
            let (nw, nh) = (
                ((f64::from(w) * k).round() as u32).max(p.width),
                ((f64::from(h) * k).round() as u32).max(p.height),
            );
            let resized = image.resize_exact(nw, nh, FilterType::Triangle);
            resized.crop_imm((nw - p.width) / 2, (nh - p.height) / 2, p.width, p.height)
        } else {
            image.resize_exact(p.width, p.height, FilterType::Triangle)
        };
        Ok(image.to_rgb8())
    }
}

impl BatchSource for ImageFolderSource {
    fn describe(&self) -> String {
        format!("{} ({} images)", self.folder.display(), self.files.len())
    }

    fn arrays(&self) -> Vec<ArraySpec> {
        let (h, w) = (
            self.preprocess.height as usize,
            self.preprocess.width as usize,
        );
        let shape = match self.preprocess.layout {
            Layout::Nchw => vec![self.files.len(), 3, h, w],
            Layout::Nhwc => vec![self.files.len(), h, w, 3],
        };
        vec![ArraySpec {
            name: self.input.clone(),
            dtype: DataType::Float32,
            shape,
        }]
    }

    fn samples(&self) -> usize {
        self.files.len()
    }

    fn rewind(&mut self) -> Result<(), DataError> {
        self.cursor.reset();
        Ok(())
    }

    fn next_batch(&mut self, max_samples: usize) -> Result<Option<Batch>, DataError> {
        let Some((index, first_sample, count)) = self.cursor.claim(max_samples, self.files.len())
        else {
            return Ok(None);
        };
        let p = self.preprocess.clone();
        let (h, w) = (p.height as usize, p.width as usize);
        let mut nchw = Array4::<f32>::zeros((count, 3, h, w));
        for i in 0..count {
            let image = self.load(&self.files[first_sample + i])?;
            for (x, y, pixel) in image.enumerate_pixels() {
                for c in 0..3 {
                    let source = if p.channels == ChannelOrder::Bgr {
                        2 - c
                    } else {
                        c
                    };
                    let v = f32::from(pixel[source]) * p.scale;
                    nchw[[i, c, y as usize, x as usize]] = (v - p.mean[c]) / p.std[c];
                }
            }
        }
        let array: ArrayD<f32> = match p.layout {
            Layout::Nchw => nchw.into_dyn(),
            Layout::Nhwc => nchw
                .permuted_axes([0, 2, 3, 1])
                .as_standard_layout()
                .into_owned()
                .into_dyn(),
        };
        let batch = Batch {
            index,
            first_sample,
            samples: count,
            inputs: vec![(self.input.clone(), TensorArray::Float32(array))],
        };
        Ok(Some(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_preprocessed_into_the_requested_layout() {
        let dir = tempfile::tempdir().unwrap();
        let mut img = image::RgbImage::new(8, 4);
        for (x, _, p) in img.enumerate_pixels_mut() {
            *p = image::Rgb([255, 0, if x < 4 { 0 } else { 255 }]);
        }
        img.save(dir.path().join("a.png")).unwrap();
        let pre = Preprocess {
            width: 8,
            height: 4,
            resize_shorter: 0,
            channels: ChannelOrder::Bgr,
            layout: Layout::Nhwc,
            scale: 1.0 / 255.0,
            mean: [0.0; 3],
            std: [1.0; 3],
        };
        let mut source = ImageFolderSource::open(dir.path(), "x", pre).unwrap();
        assert_eq!(source.arrays()[0].shape, [1, 4, 8, 3]);
        let batch = source.next_batch(4).unwrap().unwrap();
        let TensorArray::Float32(a) = &batch.inputs[0].1 else {
            panic!()
        };
        // BGR: channel 2 is red (255 → 1.0), channel 0 is blue.
        assert_eq!(a[[0, 0, 0, 2]], 1.0);
        assert_eq!(a[[0, 0, 0, 0]], 0.0);
        assert_eq!(a[[0, 0, 7, 0]], 1.0);
        assert!(source.next_batch(4).unwrap().is_none());
    }

    #[test]
    fn a_stray_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        image::RgbImage::new(2, 2)
            .save(dir.path().join("a.png"))
            .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
        let err = ImageFolderSource::open(dir.path(), "x", Preprocess::default()).unwrap_err();
        assert!(err.to_string().contains("notes.txt"), "{err}");
        std::fs::remove_file(dir.path().join("notes.txt")).unwrap();
        std::fs::write(dir.path().join("broken.jpg"), "not a jpeg").unwrap();
        let mut source = ImageFolderSource::open(dir.path(), "x", Preprocess::default()).unwrap();
        let err = source.next_batch(2).unwrap_err();
        assert!(err.to_string().contains("broken.jpg"), "{err}");
    }
}

//! The checkpoint and stripe advisor's library: the I/O models ([`model`]), the constants
//! measured on a file system and the predictions made from them ([`calib`]), fitting them
//! to measurements ([`fit`]), the advice for checkpoints ([`checkpoint`]), shared-file
//! striping ([`stripe`]) and training data sets ([`dataset`]), and SVG plots ([`plot`]).
//!
//! Pure: no I/O but writing a plot. The measuring (`weft advise calibrate`) and the verbs
//! are in the `weft` binary. `docs/advisor.md` describes the models and what was changed
//! from the seed formulas.

pub mod calib;
pub mod checkpoint;
pub mod dataset;
pub mod fit;
pub mod model;
pub mod plot;
pub mod stripe;
pub mod units;

pub use calib::Calibration;

/// What the advisor can refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A bad argument.
    #[error("{0}")]
    Input(String),
    /// A calibration out of range or unreadable.
    #[error("calibration: {0}")]
    Calibration(String),
    /// Measurements the models cannot be fitted to.
    #[error("fit: {0}")]
    Fit(String),
    /// The plot could not be drawn or written.
    #[error("plot: {0}")]
    Plot(String),
}

#[cfg(test)]
mod tests;

//! SVG line plots of the advisor's curves (stall time or bandwidth against OSTs, writers,
//! stripe count), drawn with `plotters`' SVG backend: the one place this crate writes.

use crate::Error;
use plotters::prelude::*;
use std::path::Path;

/// One named curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// A plot to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// The title.
    pub title: String,
    /// The x axis' label.
    pub x_label: String,
    /// The y axis' label.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
];

fn draw_err<E: std::fmt::Debug>(e: E) -> Error {
    Error::Plot(format!("{e:?}"))
}

impl Plot {
    /// Renders the plot as SVG text.
    pub fn to_svg(&self) -> Result<String, Error> {
        let pts = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|(x, y)| x.is_finite() && y.is_finite());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if !(x0.is_finite() && x1.is_finite()) {
            return Err(Error::Plot("nothing to plot".into()));
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        let y1 = if y1 > 0.0 { y1 * 1.08 } else { 1.0 };
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
            root.fill(&WHITE).map_err(draw_err)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(&self.title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, 0f64..y1)
                .map_err(draw_err)?;
            chart
                .configure_mesh()
                .x_desc(self.x_label.as_str())
                .y_desc(self.y_label.as_str())
                .draw()
                .map_err(draw_err)?;
            for (i, s) in self.series.iter().enumerate() {
                let colour = COLOURS[i % COLOURS.len()];
                let points: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect();
                chart
                    .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                    .map_err(draw_err)?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(draw_err)?;
            root.present().map_err(draw_err)?;
        }
        Ok(svg)
    }

    /// Writes the plot to `path` as SVG.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let svg = self.to_svg()?;
        std::fs::write(path, svg)
            .map_err(|e| Error::Plot(format!("writing {}: {e}", path.display())))
    }
}

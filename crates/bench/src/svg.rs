//! `--svg FILE`: one bar chart per workload, every figure as a multiple of
//! native (the same convention as the table), with min..max whiskers.
//!
//! Plotters with only its SVG backend: text is written as SVG `<text>`
//! elements and laid out by the viewer, so no font files or system libraries
//! are needed at build or run time.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::BenchError;
use crate::report::{Report, WorkloadReport};
use crate::stats::ratio_to_native;

const WIDTH: u32 = 1100;
const HEADER: u32 = 90;
const PANEL: u32 = 300;

/// Distinguishable on white and for common colour blindness (Okabe-Ito),
/// with grey rather than black first so native's black whisker shows.
const COLORS: [RGBColor; 8] = [
    RGBColor(110, 110, 110),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(0, 114, 178),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

fn svg_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Svg(e.to_string())
}

/// One bar: median as a ratio to the reference, and the whisker range.
struct Bar {
    ratio: f64,
    low: f64,
    high: f64,
}

/// Bars of one workload: `bars[metric][target]`, `None` where no figure exists.
fn bars(w: &WorkloadReport, reference: usize) -> Vec<Vec<Option<Bar>>> {
    (0..w.metrics.len())
        .map(|m| {
            let reference_median = w.results[reference].figures[m].summary.map(|s| s.median);
            w.results
                .iter()
                .map(|r| {
                    let fig = &r.figures[m];
                    let (s, n) = (fig.summary?, reference_median?);
                    let ratio = |x: f64| ratio_to_native(x, n, fig.unit);
                    let (a, b) = (ratio(s.min)?, ratio(s.max)?);
                    Some(Bar {
                        ratio: ratio(s.median)?,
                        low: a.min(b),
                        high: a.max(b),
                    })
                })
                .collect()
        })
        .collect()
}

impl Report {
    /// Write the chart to `path`.
    ///
    /// # Errors
    /// Drawing fails (it should not) or the file cannot be written.
    pub fn write_svg(&self, path: &Path) -> Result<(), BenchError> {
        let svg = self.svg()?;
        std::fs::write(path, svg)
            .map_err(|e| BenchError::io(format!("writing {}", path.display()), e))
    }

    /// The chart as an SVG document.
    ///
    /// # Errors
    /// Only if plotters reports a drawing error.
    pub fn svg(&self) -> Result<String, BenchError> {
        let mut out = String::new();
        let panels = self.workloads.len().max(1) as u32;
        // Ratios need a reference: native when there is one, else the first target.
        let reference = self
            .native_reference
            .as_ref()
            .and_then(|n| self.targets.iter().position(|t| &t.name == n))
            .unwrap_or(0);
        let reference_name = self.targets.get(reference).map_or("", |t| t.name.as_str());
        {
            let root = SVGBackend::with_string(&mut out, (WIDTH, HEADER + panels * PANEL))
                .into_drawing_area();
            root.fill(&WHITE).map_err(svg_err)?;
            let (header, body) = root.split_vertically(HEADER);
            let font = |size: f64| ("sans-serif", size).into_font();
            header
                .draw(&Text::new(
                    format!(
                        "crossfs bench ({} sizes, {} runs): x {reference_name}, 1.00 = {reference_name}, higher is better; whiskers: min..max",
                        if self.config.quick { "quick" } else { "full" },
                        self.config.runs
                    ),
                    (12, 10),
                    font(16.0),
                ))
                .map_err(svg_err)?;
            let mut x = 12;
            for (i, t) in self.targets.iter().enumerate() {
                header
                    .draw(&Rectangle::new([(x, 48), (x + 14, 62)], color(i).filled()))
                    .map_err(svg_err)?;
                header
                    .draw(&Text::new(t.name.clone(), (x + 20, 48), font(13.0)))
                    .map_err(svg_err)?;
                // The naive font backend cannot measure text: estimate ~7 px a character.
                x += 40 + 7 * t.name.len() as i32;
            }

            for (w, area) in self
                .workloads
                .iter()
                .zip(body.split_evenly((panels as usize, 1)))
            {
                self.draw_panel(&area, w, reference, reference_name)?;
            }
            root.present().map_err(svg_err)?;
        }
        Ok(out)
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        w: &WorkloadReport,
        reference: usize,
        reference_name: &str,
    ) -> Result<(), BenchError>
    where
        DB::ErrorType: 'static,
    {
        let bars = bars(w, reference);
        let groups = w.metrics.len() as f64;
        let ymax = bars
            .iter()
            .flatten()
            .flatten()
            .map(|b| b.high)
            .fold(1.0f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("[{}] {}: {}", w.number, w.id, w.title),
                ("sans-serif", 13),
            )
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..groups, 0f64..ymax)
            .map_err(svg_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(format!("x {reference_name}"))
            .y_label_formatter(&|v| format!("{v:.2}"))
            .draw()
            .map_err(svg_err)?;

        let targets = self.targets.len().max(1) as f64;
        let width = 0.8 / targets;
        let small = TextStyle::from(("sans-serif", 10).into_font());
        for (m, per_target) in bars.iter().enumerate() {
            for (t, bar) in per_target.iter().enumerate() {
                let x0 = m as f64 + 0.1 + t as f64 * width;
                let mid = x0 + width / 2.0;
                let centered = small.clone().pos(Pos::new(HPos::Center, VPos::Bottom));
                let Some(bar) = bar else {
                    // An explicit mark where a figure is missing, never a silent gap.
                    chart
                        .draw_series(std::iter::once(Text::new("n/a", (mid, 0.0), centered)))
                        .map_err(svg_err)?;
                    continue;
                };
                let c = color(t);
                chart
                    .draw_series([
                        Rectangle::new([(x0, 0.0), (x0 + width * 0.9, bar.ratio)], c.filled()),
                        Rectangle::new(
                            [(x0, 0.0), (x0 + width * 0.9, bar.ratio)],
                            BLACK.stroke_width(1),
                        ),
                    ])
                    .map_err(svg_err)?;
                let whisker = x0 + width * 0.45;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(whisker, bar.low), (whisker, bar.high)],
                        BLACK.stroke_width(1),
                    )))
                    .map_err(svg_err)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!("{:.2}", bar.ratio),
                        (whisker, bar.high.max(bar.ratio)),
                        centered,
                    )))
                    .map_err(svg_err)?;
            }
        }
        // The reference level, and the metric names under their groups.
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 1.0), (groups, 1.0)],
                RGBColor(120, 120, 120).stroke_width(1),
            )))
            .map_err(svg_err)?;
        let label =
            TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        chart
            .draw_series(w.metrics.iter().enumerate().map(|(m, def)| {
                EmptyElement::at((m as f64 + 0.5, 0.0))
                    + Text::new(
                        format!("{} ({})", def.id, def.unit.label()),
                        (0, 6),
                        label.clone(),
                    )
            }))
            .map_err(svg_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::report::tests::sample_report;

    #[test]
    fn svg_has_a_panel_per_workload_and_every_target() {
        let svg = sample_report().svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.contains("[5] negative"));
        assert!(svg.contains("[7] build"));
        assert!(svg.contains("crossfs") && svg.contains("native"));
        // crossfs never built: marked, not silently absent.
        assert!(svg.contains("n/a"));
        assert!(svg.contains("probe-first (lookups/s)"));
    }

    #[test]
    fn writes_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.svg");
        sample_report().write_svg(&path).unwrap();
        assert!(std::fs::read_to_string(path).unwrap().contains("</svg>"));
    }
}

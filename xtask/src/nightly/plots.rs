//! The report's plots, drawn as SVG text by plotters: lines with optional p10–p90 whiskers and
//! vertical markers (time against size, log–log, crossovers marked; values over the nights), and
//! bars around a baseline (graph replay's speed-up over eager runs).
use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One line of a plot.
pub struct Series {
    pub name: String,
    /// (x, y), in data units (before any log scale).
    pub points: Vec<(f64, f64)>,
    /// (x, low, high): a whisker per point (p10–p90).
    pub whiskers: Vec<(f64, f64, f64)>,
}

/// A line plot.
pub struct Lines {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
    /// Vertical lines at x with a label (crossovers).
    pub markers: Vec<(f64, String)>,
    /// Names for integer x positions (dates), instead of numbers.
    pub x_names: Vec<String>,
}

const SIZE: (u32, u32) = (720, 380);

fn tx(log: bool, v: f64) -> f64 {
    if log { v.max(1e-12).log10() } else { v }
}

fn pad(lo: f64, hi: f64, log: bool) -> (f64, f64) {
    if (hi - lo).abs() < 1e-12 {
        let d = if log { 0.5 } else { lo.abs().max(1.0) * 0.1 };
        return (lo - d, hi + d);
    }
    let d = (hi - lo) * 0.05;
    (lo - d, hi + d)
}

fn label(log: bool, v: f64) -> String {
    if log {
        let p = 10f64.powf(v);
        if !(1e-2..1e4).contains(&p) {
            format!("{p:.0e}")
        } else {
            format!("{}", (p * 1000.0).round() / 1000.0)
        }
    } else {
        format!("{}", (v * 1000.0).round() / 1000.0)
    }
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing a plot: {e}")
}

/// Draws a line plot; an empty one says so in its middle.
pub fn lines(p: &Lines) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let all: Vec<(f64, f64)> = p
            .series
            .iter()
            .flat_map(|s| {
                s.points.iter().copied().chain(
                    s.whiskers
                        .iter()
                        .flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]),
                )
            })
            .map(|(x, y)| (tx(p.log_x, x), tx(p.log_y, y)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        if all.is_empty() {
            root.draw(&Text::new(
                format!("{}: no data", p.title),
                (40, SIZE.1 as i32 / 2),
                ("sans-serif", 18).into_font(),
            ))
            .map_err(err)?;
            root.present().map_err(err)?;
            drop(root);
            return Ok(svg);
        }
        let (mut x0, mut x1) = all
            .iter()
            .fold((f64::MAX, f64::MIN), |a, v| (a.0.min(v.0), a.1.max(v.0)));
        for (x, _) in &p.markers {
            x0 = x0.min(tx(p.log_x, *x));
            x1 = x1.max(tx(p.log_x, *x));
        }
        let (y0, y1) = all
            .iter()
            .fold((f64::MAX, f64::MIN), |a, v| (a.0.min(v.1), a.1.max(v.1)));
        let (x0, x1) = pad(x0, x1, p.log_x);
        let (y0, y1) = pad(y0, y1, p.log_y);
        let mut chart = ChartBuilder::on(&root)
            .caption(&p.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        let names = p.x_names.clone();
        let (lx, ly) = (p.log_x, p.log_y);
        let fx = move |v: &f64| {
            if names.is_empty() {
                label(lx, *v)
            } else {
                let i = v.round();
                if (v - i).abs() < 0.01 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
        };
        let fy = move |v: &f64| label(ly, *v);
        chart
            .configure_mesh()
            .x_desc(&p.x_desc)
            .y_desc(&p.y_desc)
            .x_label_formatter(&fx)
            .y_label_formatter(&fy)
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        for (i, s) in p.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| (tx(lx, x), tx(ly, y)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(&s.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
            chart
                .draw_series(s.whiskers.iter().map(|&(x, lo, hi)| {
                    PathElement::new(
                        vec![(tx(lx, x), tx(ly, lo)), (tx(lx, x), tx(ly, hi))],
                        color,
                    )
                }))
                .map_err(err)?;
        }
        for (x, text) in &p.markers {
            let x = tx(lx, *x);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, y0), (x, y1)],
                    RED.stroke_width(2),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    text.clone(),
                    (x, y1 - (y1 - y0) * 0.04),
                    ("sans-serif", 13).into_font().color(&RED),
                )))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One bar: a name, a value and whether it is good (green), bad (red) or undecided (grey).
pub struct Bar {
    pub name: String,
    pub value: f64,
    pub verdict: String,
}

/// Bars against a baseline of 1 (replay's speed-up over eager: above 1 wins).
pub fn bars(title: &str, y_desc: &str, bars: &[Bar]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        if bars.is_empty() {
            root.draw(&Text::new(
                format!("{title}: no data"),
                (40, SIZE.1 as i32 / 2),
                ("sans-serif", 18).into_font(),
            ))
            .map_err(err)?;
            root.present().map_err(err)?;
            drop(root);
            return Ok(svg);
        }
        let top = bars.iter().map(|b| b.value).fold(1.0f64, f64::max) * 1.15;
        let n = bars.len() as f64;
        let names: Vec<String> = bars.iter().map(|b| b.name.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5..n - 0.5, 0.0..top)
            .map_err(err)?;
        let fx = move |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .y_desc(y_desc)
            .x_labels(bars.len().max(2))
            .x_label_formatter(&fx)
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let color = match b.verdict.as_str() {
                    "win" => GREEN.mix(0.8),
                    "loss" => RED.mix(0.8),
                    _ => BLACK.mix(0.3),
                };
                let x = i as f64;
                Rectangle::new([(x - 0.35, 0.0), (x + 0.35, b.value)], color.filled())
            }))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(-0.5, 1.0), (n - 0.5, 1.0)],
                BLACK.stroke_width(1),
            )))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_hold_their_data_and_empty_ones_say_so() {
        let svg = lines(&Lines {
            title: "elementwise".into(),
            x_desc: "elements".into(),
            y_desc: "ms".into(),
            log_x: true,
            log_y: true,
            series: vec![Series {
                name: "cpu".into(),
                points: vec![(16.0, 0.01), (1024.0, 0.02), (1e6, 1.0)],
                whiskers: vec![(16.0, 0.009, 0.012)],
            }],
            markers: vec![(5e4, "cuda from 5e4".into())],
            x_names: vec![],
        })
        .unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
        assert!(
            svg.contains("cuda from 5e4") && svg.contains("\ncpu\n"),
            "{svg}"
        );
        let empty = lines(&Lines {
            title: "t".into(),
            x_desc: String::new(),
            y_desc: String::new(),
            log_x: false,
            log_y: false,
            series: vec![],
            markers: vec![],
            x_names: vec![],
        })
        .unwrap();
        assert!(empty.contains("t: no data") && !empty.contains("<polyline"));
        let b = bars(
            "graphs",
            "speed-up",
            &[Bar {
                name: "resnet50".into(),
                value: 1.8,
                verdict: "win".into(),
            }],
        )
        .unwrap();
        assert!(b.contains("<rect") && b.contains("resnet50"));
    }
}

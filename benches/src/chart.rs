//! The PNG chart: median operations per second per workload and engine, as horizontal bars on
//! a log scale (the queue and the fills differ by four orders of magnitude).
//!
//! Text is drawn with a TrueType font read at run time: the file `CAIRN_BENCH_FONT` names, else
//! the `DejaVu` or Liberation sans font where Debian and most distributions put them. Building
//! the chart so needs no system library.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::Result;
use crate::engine::EngineKind;
use crate::report::fmt_rate;

/// Font files tried in order after `CAIRN_BENCH_FONT`.
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

const LABEL_WIDTH: u32 = 190;
const WIDTH: u32 = 1400;
const ROW_HEIGHT: u32 = 44;

/// One bar group: a row's name and each engine's median ops/s.
pub type Bars = (String, Vec<(EngineKind, f64)>);

fn register_font() -> Result<()> {
    static FONT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let candidates: Vec<PathBuf> = std::env::var_os("CAIRN_BENCH_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(FONT_PATHS.iter().map(PathBuf::from))
            .collect();
        let bytes = candidates
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| {
                "no TrueType font found for the chart: set CAIRN_BENCH_FONT to a .ttf file"
                    .to_string()
            })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "the chart font is not a valid TrueType font".to_string())
    })
    .clone()
    .map_err(Into::into)
}

fn color(engine: EngineKind) -> RGBColor {
    match engine {
        EngineKind::Cairn => RGBColor(0x1b, 0x9e, 0x77),
        EngineKind::CairnLz4 => RGBColor(0x66, 0xa6, 0x1e),
        EngineKind::Fjall => RGBColor(0xd9, 0x5f, 0x02),
        EngineKind::Rocksdb => RGBColor(0x75, 0x70, 0xb3),
    }
}

/// Draws `bars` for `engines` into a PNG at `path`.
///
/// # Errors
/// If no font is found or the file cannot be written.
pub fn draw(path: &Path, title: &str, engines: &[EngineKind], bars: &[Bars]) -> Result<()> {
    register_font()?;
    let rows = u32::try_from(bars.len())?;
    let n = f64::from(rows.max(1));
    let values = bars.iter().flat_map(|(_, v)| v.iter().map(|(_, x)| *x));
    let max = values.clone().fold(1.0_f64, f64::max);
    let min = values.filter(|&x| x > 0.0).fold(max, f64::min);
    let lo = 10f64.powf(min.log10().floor().min(max.log10().floor() - 1.0));
    let hi = 10f64.powf((max * 3.0).log10().ceil());

    let height = 140 + ROW_HEIGHT * rows;
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (_, area) = root.split_horizontally(LABEL_WIDTH);
    let mut chart = ChartBuilder::on(&area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..n)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("operations per second (log scale)")
        .x_label_formatter(&|x| fmt_rate(*x))
        .label_style(("sans-serif", 14))
        .draw()?;

    let m = engines.len().max(1);
    #[expect(clippy::cast_precision_loss, reason = "a handful of engines")]
    let band = 0.8 / m as f64;
    for (k, &engine) in engines.iter().enumerate() {
        let c = color(engine);
        #[expect(clippy::cast_precision_loss, reason = "a handful of engines and rows")]
        let bars_of = bars.iter().enumerate().filter_map(|(i, (_, v))| {
            let x = v.iter().find(|(e, _)| *e == engine)?.1;
            // The first engine's bar on top of each group.
            let y0 = n - 1.0 - i as f64 + 0.1 + (m - 1 - k) as f64 * band;
            Some((x, y0, y0 + band))
        });
        chart
            .draw_series(
                bars_of
                    .clone()
                    .map(|(x, y0, y1)| Rectangle::new([(lo, y0), (x.max(lo), y1)], c.filled())),
            )?
            .label(engine.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        let style =
            TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        chart.draw_series(bars_of.map(|(x, y0, y1)| {
            Text::new(
                format!(" {}", fmt_rate(x)),
                (x.max(lo), f64::midpoint(y0, y1)),
                style.clone(),
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;

    let label =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, (name, _)) in bars.iter().enumerate() {
        #[expect(clippy::cast_precision_loss, reason = "a handful of rows")]
        let y = n - 0.5 - i as f64;
        let (_, py) = chart.backend_coord(&(lo, y));
        let px = i32::try_from(LABEL_WIDTH)? - 4;
        root.draw(&Text::new(name.clone(), (px, py), label.clone()))?;
    }
    root.present()?;
    Ok(())
}

/// Draws `churn`'s samples into a PNG at `path`: four panels over elapsed time, one line per
/// engine each: the sizes of the files over live bytes, what the file system allocated to them
/// over live bytes (fjall's journal is a sparse file), read p99, and operations per second.
///
/// # Errors
/// If no font is found or the file cannot be written.
pub fn draw_churn(
    path: &Path,
    title: &str,
    series: &[(EngineKind, Vec<crate::churn::ChurnSample>)],
) -> Result<()> {
    type Pick = fn(&crate::churn::ChurnSample) -> f64;
    const PANELS: [(&str, Pick); 4] = [
        ("disk bytes / live key+value bytes", |s| s.disk_over_live),
        ("allocated bytes / live key+value bytes", |s| {
            s.allocated_bytes / s.live_bytes.max(1.0)
        }),
        ("read p99 in the interval, µs", |s| s.read_p99_us),
        ("operations per second in the interval", |s| s.ops_per_sec),
    ];
    register_font()?;
    let root = BitMapBackend::new(path, (WIDTH, 1400)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let x_max = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|x| x.elapsed_secs))
        .fold(1.0_f64, f64::max);
    for (area, (label, pick)) in root.split_evenly((PANELS.len(), 1)).iter().zip(PANELS) {
        let y_max = series
            .iter()
            .flat_map(|(_, s)| s.iter().map(pick))
            .filter(|y| y.is_finite())
            .fold(0.0_f64, f64::max);
        let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the soak began")
            .y_desc(label)
            .y_label_formatter(&|y| {
                if *y >= 1e3 {
                    fmt_rate(*y)
                } else {
                    format!("{y:.2}")
                }
            })
            .label_style(("sans-serif", 14))
            .draw()?;
        for (engine, samples) in series {
            let c = color(*engine);
            let points: Vec<(f64, f64)> =
                samples.iter().map(|s| (s.elapsed_secs, pick(s))).collect();
            chart
                .draw_series(std::iter::once(PathElement::new(
                    points.clone(),
                    c.stroke_width(3),
                )))?
                .label(engine.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(3))
                });
            chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 15))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

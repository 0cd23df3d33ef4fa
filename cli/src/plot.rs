//! The command line's charts, drawn with plotters: `cairn inspect levels --plot FILE.png`
//! (bytes per level and the tombstone share of each, one bar per level of each column family)
//! and `cairn stress erasure --plot FILE.png` (deleted values still on disk over time, a line
//! per kind of file, the run's phases marked).
//!
//! Text needs a TrueType font, read at run time (no font library is linked): `CAIRN_FONT`
//! names one, else the first of a few usual system paths, else any `.ttf` under
//! `/usr/share/fonts`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const FONT: &str = "sans-serif";
const WIDTH: u32 = 1000;
const HEIGHT: u32 = 700;

/// One level of one column family, as a pair of bars.
pub struct LevelBar {
    /// `family Ln`.
    pub label: String,
    /// Bytes on disk.
    pub bytes: u64,
    /// Tombstones over entries, from 0 to 1.
    pub tombstone_share: f64,
}

/// Draws `bars` into the PNG at `path`, under `title` (the database and the time).
///
/// # Errors
/// A message: no font found, no level to draw, or the drawing or file failed.
pub fn levels(bars_of: &[LevelBar], title: &str, path: &Path) -> Result<(), String> {
    if bars_of.is_empty() {
        return Err("no level holds a table: nothing to draw".to_owned());
    }
    load_font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root.titled(title, (FONT, 18)).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(HEIGHT * 11 / 20);
    let labels: Vec<String> = bars_of.iter().map(|b| b.label.clone()).collect();
    #[allow(clippy::cast_precision_loss, reason = "bar heights for people to read")]
    let bytes: Vec<f64> = bars_of.iter().map(|b| b.bytes as f64).collect();
    let share: Vec<f64> = bars_of.iter().map(|b| b.tombstone_share * 100.0).collect();
    let scale = Scale::for_values(&bytes);
    let bytes_title = match scale {
        Scale::Linear => "Bytes per level",
        Scale::Log { .. } => {
            "Bytes per level (log scale: the levels differ by orders of magnitude)"
        }
    };
    let chart = Chart {
        labels: &labels,
        color: BLUE.mix(0.7),
    };
    chart.draw(&top, bytes_title, &bytes, scale, human_bytes)?;
    let chart = Chart {
        labels: &labels,
        color: RED.mix(0.7),
    };
    chart.draw(
        &bottom,
        "Tombstone share of entries (%)",
        &share,
        Scale::Linear,
        |v| format!("{v:.1}%"),
    )?;
    root.present().map_err(|e| e.to_string())
}

/// Draws the erasure figure into the PNG at `path`: each of `lines` (deleted values on disk
/// against seconds) in its own colour, and a grey mark where each of `phases` begins.
///
/// # Errors
/// A message: no font found, no sample to draw, or the drawing or file failed.
pub fn erasure(
    lines: &BTreeMap<String, Vec<(f64, u64)>>,
    phases: &[(f64, String)],
    title: &str,
    path: &Path,
) -> Result<(), String> {
    let points = lines.values().flatten();
    let right = points.clone().map(|p| p.0).fold(0.0_f64, f64::max).max(1.0) * 1.12;
    #[allow(
        clippy::cast_precision_loss,
        reason = "axis heights for people to read"
    )]
    let top = points.map(|p| p.1 as f64).fold(0.0_f64, f64::max).max(1.0) * 1.15;
    if lines.is_empty() {
        return Err("no sample to draw".to_owned());
    }
    load_font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 18))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..right, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("seconds since the deletes")
        .y_desc("deleted values on disk")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 14))
        .draw()
        .map_err(|e| e.to_string())?;
    for (n, (t, phase)) in phases.iter().enumerate() {
        let mark = ShapeStyle::from(&BLACK.mix(0.3)).stroke_width(1);
        chart
            .draw_series([PathElement::new(vec![(*t, 0.0), (*t, top)], mark)])
            .map_err(|e| e.to_string())?;
        let label = (FONT, 13).into_font().color(&BLACK.mix(0.7));
        chart
            // Alternate heights: phases can begin a moment apart.
            .draw_series([Text::new(
                phase.clone(),
                (*t, top * if n % 2 == 0 { 0.97 } else { 0.92 }),
                label,
            )])
            .map_err(|e| e.to_string())?;
    }
    // The total goes last, thin and black, so the lines it sums cannot hide it.
    let ordered = lines
        .iter()
        .filter(|(name, _)| !name.starts_with("all"))
        .chain(lines.iter().filter(|(name, _)| name.starts_with("all")));
    for (n, (name, points)) in ordered.enumerate() {
        let (color, width) = if name.starts_with("all") {
            (BLACK.to_rgba(), 1)
        } else {
            (Palette99::pick(n).to_rgba(), 4)
        };
        #[allow(
            clippy::cast_precision_loss,
            reason = "axis heights for people to read"
        )]
        let xy: Vec<(f64, f64)> = points.iter().map(|&(t, v)| (t, v as f64)).collect();
        chart
            // The total thin over wide lines: one kind of file holding them all still shows.
            .draw_series([PathElement::new(xy.clone(), color.stroke_width(width))])
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 18, y)], color.stroke_width(width))
            });
        chart
            .draw_series(xy.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 14))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Bytes in the unit that suits them: `512 B`, `1.3 KiB`, `786.2 KiB`, `4.0 MiB`.
fn human_bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = v;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let name = UNITS.get(unit).copied().unwrap_or("B");
    if unit == 0 {
        format!("{value:.0} {name}")
    } else {
        format!("{value:.1} {name}")
    }
}

/// How bar heights map to the axis: as they are, or as their logarithm when the largest is more
/// than 100 times the smallest non-zero one (a small level would otherwise be invisible).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    /// log10 heights; `floor` is the axis's bottom (a decade below the smallest value).
    Log {
        floor: f64,
    },
}

impl Scale {
    fn for_values(values: &[f64]) -> Self {
        let positive = values.iter().copied().filter(|v| *v > 0.0);
        let smallest = positive.clone().fold(f64::INFINITY, f64::min);
        let largest = positive.fold(0.0_f64, f64::max);
        if smallest.is_finite() && largest / smallest > 100.0 {
            Self::Log {
                floor: smallest.log10().floor() - 1.0,
            }
        } else {
            Self::Linear
        }
    }

    /// A value's height on the axis.
    fn height(self, v: f64) -> f64 {
        match self {
            Self::Linear => v,
            Self::Log { floor } if v > 0.0 => v.log10() - floor,
            Self::Log { .. } => 0.0,
        }
    }

    /// The value at a height, for the axis labels.
    fn value(self, h: f64) -> f64 {
        match self {
            Self::Linear => h,
            Self::Log { floor } => 10_f64.powf(h + floor),
        }
    }
}

/// One bar chart: a bar per label, in one colour.
struct Chart<'a> {
    labels: &'a [String],
    color: RGBAColor,
}

impl Chart<'_> {
    /// Draws `values` on `area` under `title`, each bar labelled with `text(value)`.
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        title: &str,
        values: &[f64],
        scale: Scale,
        text: fn(f64) -> String,
    ) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        let n = u32::try_from(self.labels.len()).map_err(|e| e.to_string())?;
        let heights: Vec<f64> = values.iter().map(|v| scale.height(*v)).collect();
        let top = heights.iter().copied().fold(0.0_f64, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(72)
            .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0.0..top)
            .map_err(|e| e.to_string())?;
        let labels = self.labels;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(labels.len())
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => usize::try_from(*i)
                    .ok()
                    .and_then(|i| labels.get(i))
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&|h| text(scale.value(*h)))
            .label_style((FONT, 14))
            .draw()
            .map_err(|e| e.to_string())?;
        let color = self.color;
        chart
            .draw_series(heights.iter().zip(0..n).map(|(&h, i)| {
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), h),
                    ],
                    color.filled(),
                );
                bar.set_margin(0, 0, 8, 8);
                bar
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(heights.iter().zip(values).zip(0..n).map(|((&h, &v), i)| {
                Text::new(
                    text(v),
                    (SegmentValue::CenterOf(i), h + top * 0.02),
                    (FONT, 13)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            }))
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Registers the first TrueType font found as `sans-serif`.
fn load_font() -> Result<(), String> {
    let path = font_path()
        .ok_or("no TrueType font found: set CAIRN_FONT to a .ttf file (e.g. DejaVuSans.ttf)")?;
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // plotters keeps registered fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FONT, FontStyle::Normal, bytes)
        .map_err(|_| format!("{} is not a font plotters can read", path.display()))
}

fn font_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_FONT") {
        return Some(PathBuf::from(p));
    }
    let usual = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/System/Library/Fonts/Supplemental/Arial.ttf",
        "/Library/Fonts/Arial.ttf",
        "C:\\Windows\\Fonts\\arial.ttf",
    ];
    usual
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| find_ttf(Path::new("/usr/share/fonts"), 4))
}

fn find_ttf(dir: &Path, depth: u32) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    entries
        .iter()
        .find(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")))
        .cloned()
        .or_else(|| {
            (depth > 0)
                .then(|| {
                    entries
                        .iter()
                        .filter(|p| p.is_dir())
                        .find_map(|d| find_ttf(d, depth - 1))
                })
                .flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_orders_of_magnitude_apart_get_a_log_scale_that_keeps_every_bar_visible() {
        assert_eq!(Scale::for_values(&[10.0, 900.0, 0.0]), Scale::Linear);
        let scale = Scale::for_values(&[1_300.0, 800_000.0, 0.0]);
        assert!(matches!(scale, Scale::Log { .. }), "{scale:?}");
        let small = scale.height(1_300.0);
        let large = scale.height(800_000.0);
        assert!(small > 0.0 && large > small, "{small} {large}");
        assert!((scale.value(small) - 1_300.0).abs() < 1e-6);
        assert!(scale.height(0.0).abs() < f64::EPSILON);
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(1_331.2), "1.3 KiB");
        assert_eq!(human_bytes(4.0 * 1_048_576.0), "4.0 MiB");
    }
}

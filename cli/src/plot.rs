//! `cairn inspect levels --plot FILE.png`: bytes per level and the tombstone share of each,
//! one bar per level of each column family, drawn with plotters.
//!
//! Text needs a TrueType font, read at run time (no font library is linked): `CAIRN_FONT`
//! names one, else the first of a few usual system paths, else any `.ttf` under
//! `/usr/share/fonts`.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::FontStyle;

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

/// Draws `bars` into the PNG at `path`.
///
/// # Errors
/// A message: no font found, no level to draw, or the drawing or file failed.
pub fn levels(bars_of: &[LevelBar], path: &Path) -> Result<(), String> {
    if bars_of.is_empty() {
        return Err("no level holds a table: nothing to draw".to_owned());
    }
    load_font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(HEIGHT * 11 / 20);
    let labels: Vec<String> = bars_of.iter().map(|b| b.label.clone()).collect();
    #[allow(clippy::cast_precision_loss, reason = "bar heights for people to read")]
    let mib: Vec<f64> = bars_of
        .iter()
        .map(|b| b.bytes as f64 / 1_048_576.0)
        .collect();
    let share: Vec<f64> = bars_of.iter().map(|b| b.tombstone_share * 100.0).collect();
    bars(&top, "Bytes per level (MiB)", &labels, &mib, BLUE.mix(0.7))?;
    bars(
        &bottom,
        "Tombstone share of entries (%)",
        &labels,
        &share,
        RED.mix(0.7),
    )?;
    root.present().map_err(|e| e.to_string())
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    labels: &[String],
    values: &[f64],
    color: RGBAColor,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let n = u32::try_from(labels.len()).map_err(|e| e.to_string())?;
    let top = values.iter().copied().fold(0.0_f64, f64::max).max(1.0) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0.0..top)
        .map_err(|e| e.to_string())?;
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
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style((FONT, 14))
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(values.iter().zip(0..n).map(|(&v, i)| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), v),
                ],
                color.filled(),
            );
            bar.set_margin(0, 0, 8, 8);
            bar
        }))
        .map_err(|e| e.to_string())?;
    Ok(())
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

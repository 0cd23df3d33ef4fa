//! The process's progress area on stderr: every progress bar a run shows (the harness's, and
//! the `cairn` command's own) is drawn in this one `MultiProgress`, so a log line or a line of
//! output can be written above the bars (`MultiProgress::suspend`) instead of being glued to one.
//!
//! When stderr is not a terminal indicatif draws nothing, and lines are written as they come.

use std::sync::OnceLock;

use indicatif::{MultiProgress, ProgressBar};

/// The process's progress area.
pub fn area() -> &'static MultiProgress {
    static AREA: OnceLock<MultiProgress> = OnceLock::new();
    AREA.get_or_init(MultiProgress::new)
}

/// `bar`, drawn in the process's progress area.
pub fn show(bar: ProgressBar) -> ProgressBar {
    area().add(bar)
}

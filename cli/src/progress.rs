//! Progress bars and logs that share stderr without tearing each other: every bar is drawn in
//! the process's one progress area (`cairn_stress::progress`), and the log writer clears the
//! bars, writes its line, and lets them be drawn again.

use std::io::Write;

/// A bar of `total` steps in the process's progress area.
pub fn bar(total: u64) -> indicatif::ProgressBar {
    cairn_stress::progress::show(indicatif::ProgressBar::new(total))
}

/// A hidden bar (no progress asked for), or [`bar`].
pub fn bar_if(show: bool, total: u64) -> indicatif::ProgressBar {
    if show {
        bar(total)
    } else {
        indicatif::ProgressBar::hidden()
    }
}

/// The writer logs go through: stderr, one whole line at a time above the bars.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_above(cairn_stress::progress::area(), &mut std::io::stderr(), buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Writes `line` to `out` with the bars of `area` cleared from the screen while it does.
fn write_above(
    area: &indicatif::MultiProgress,
    out: &mut dyn Write,
    line: &[u8],
) -> std::io::Result<()> {
    area.suspend(|| out.write_all(line).and_then(|()| out.flush()))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, TermLike};

    /// A terminal that records what is done to it, in order, in a log shared with the writer.
    #[derive(Debug, Clone)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Recorder {
        fn push(&self, what: String) {
            self.0.lock().expect("lock").push(what);
        }
    }

    impl TermLike for Recorder {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
            self.push(format!("up {n}"));
            Ok(())
        }
        fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
            self.push(format!("down {n}"));
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.push(format!("bar {s}"));
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.push(format!("bar {s}"));
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.push("clear".to_owned());
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl std::io::Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.push(format!("log {}", String::from_utf8_lossy(buf)));
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_log_line_is_written_with_the_bar_cleared_and_the_bar_comes_back_after_it() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let term = Recorder(events.clone());
        let area =
            MultiProgress::with_draw_target(ProgressDrawTarget::term_like(Box::new(term.clone())));
        let bar = area.add(ProgressBar::new(10));
        bar.set_message("working");
        bar.inc(1);
        bar.tick();
        let mut out = term.clone();
        super::write_above(&area, &mut out, b"WARN a log line\n").expect("write");
        // Nothing ticks the bar after this: what is drawn after the line, the write drew.
        let events = events.lock().expect("lock").clone();
        let log = events
            .iter()
            .position(|e| e.starts_with("log "))
            .expect("the log line was written");
        let drawn_before = events.iter().take(log).any(|e| e.starts_with("bar "));
        assert!(drawn_before, "the bar was on screen first: {events:?}");
        let last_draw = events
            .iter()
            .take(log)
            .rposition(|e| e.starts_with("bar "))
            .expect("drawn");
        assert!(
            events
                .get(last_draw..log)
                .is_some_and(|between| between.iter().any(|e| e == "clear")),
            "the bar is cleared before the log line: {events:?}"
        );
        assert!(
            events.iter().skip(log).any(|e| e.starts_with("bar ")),
            "the bar is drawn again after it: {events:?}"
        );
    }
}

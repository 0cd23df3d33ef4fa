//! Each engine's workload runs in a child process of its own, so that the memory it reports is
//! its own: in one process the allocator keeps what an earlier engine freed, and the peak
//! resident set (`VmHWM`) would count it for the next.
//!
//! The parent runs this binary again with its own arguments plus `--child-run
//! ENGINE/WORKLOAD/ROUND --child-dir DIR`. The child runs that one workload, adds its memory
//! figures to each row (`peak_rss_mb`, the process's peak resident set, mapped table pages
//! included; `peak_anon_mb`, the most anonymous memory sampled every 5 ms: heap, memtables,
//! caches) and what it had written to disk (`disk_write_mb`, from `/proc/self/io`), and
//! prints the rows as JSON on stdout. Its stderr passes through. A child that
//! fails, or prints no rows, fails the job: nothing is reported for it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::Result;
use crate::engine::EngineKind;
use crate::settings::Settings;
use crate::workload::{self, Measurement, ROWS, Workload};

/// One workload on one engine in one round.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub engine: EngineKind,
    pub workload: Workload,
    pub round: u64,
}

impl Job {
    fn spec(self) -> String {
        format!(
            "{}/{}/{}",
            self.engine.name(),
            self.workload.name(),
            self.round
        )
    }

    fn parse(spec: &str) -> Result<Self> {
        let mut parts = spec.split('/');
        let (Some(engine), Some(workload), Some(round), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("--child-run {spec:?}: expected ENGINE/WORKLOAD/ROUND").into());
        };
        Ok(Self {
            engine: EngineKind::parse(engine)?,
            workload: Workload::parse(workload)?,
            round: round.parse()?,
        })
    }
}

/// Runs `job` on a new database in `dir` in a child process and returns its rows.
///
/// # Errors
/// The child could not start, failed (its messages are on stderr), ran past `timeout` (it is
/// killed), or printed no rows.
pub fn run(job: Job, dir: &Path, timeout: Duration) -> Result<Vec<Measurement>> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .arg("--child-run")
        .arg(job.spec())
        .arg("--child-dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    // Read while waiting: a child whose output fills the pipe would never end otherwise.
    let mut stdout = child.stdout.take().ok_or("its process has no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() >= timeout {
            child.kill()?;
            child.wait()?;
            return Err(format!(
                "its process ran past {} s and was killed",
                timeout.as_secs()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = reader.join().map_err(|_| "reading its output panicked")??;
    if !status.success() {
        return Err(format!("its process ended with {status}").into());
    }
    let rows: Vec<Printed> =
        serde_json::from_slice(&stdout).map_err(|e| format!("its process printed no rows: {e}"))?;
    if rows.is_empty() {
        return Err("its process printed no rows".into());
    }
    rows.into_iter().map(Printed::into_measurement).collect()
}

/// A [`Measurement`] as the child prints it.
#[derive(serde::Deserialize)]
struct Printed {
    row: String,
    secs: f64,
    ops: u64,
    fraction: Option<f64>,
    fifths: Option<Vec<f64>>,
    #[serde(default)]
    churn: Option<Vec<crate::churn::ChurnSample>>,
    extra: Vec<(String, f64)>,
    note: Option<String>,
}

impl Printed {
    fn into_measurement(self) -> Result<Measurement> {
        let Some(row) = ROWS.iter().find(|r| **r == self.row) else {
            return Err(format!("its process printed an unknown row {:?}", self.row).into());
        };
        Ok(Measurement {
            row,
            secs: self.secs,
            ops: self.ops,
            fraction: self.fraction,
            fifths: self.fifths,
            churn: self.churn,
            extra: self.extra,
            note: self.note,
        })
    }
}

/// In the child: runs the job `spec` names in `dir` and prints its rows with the memory
/// figures.
///
/// # Errors
/// The workload's error.
pub fn serve(spec: &str, dir: &Path, settings: &Settings) -> Result<()> {
    let job = Job::parse(spec)?;
    let written_before = disk_written()?;
    let sampler = Sampler::start();
    let rows = workload::run(job.engine, job.workload, dir, settings, job.round);
    let anon = sampler.stop();
    let peak = status_mb("VmHWM:");
    // A figure that cannot be read fails the job rather than leave a gap the report would skip.
    let (Some(peak), Some(anon)) = (peak, anon) else {
        return Err("could not read VmHWM and RssAnon from /proc/self/status".into());
    };
    let written = disk_written()?.saturating_sub(written_before);
    // Every workload writes a database: nothing counted means the directory's file system
    // does not count writes (tmpfs), not that the engine wrote nothing.
    if written == 0 {
        return Err(format!(
            "{}: /proc/self/io counted no disk writes (a tmpfs directory?): give --dir on a disk",
            dir.display()
        )
        .into());
    }
    #[expect(clippy::cast_precision_loss, reason = "byte counts are far below 2^52")]
    let written_mb = written as f64 / 1e6;
    let rows: Vec<Measurement> = rows?
        .into_iter()
        .map(|m| {
            m.with("peak_rss_mb", peak)
                .with("peak_anon_mb", anon)
                .with("disk_write_mb", written_mb)
        })
        .collect();
    println!("{}", serde_json::to_string(&rows)?);
    Ok(())
}

/// Samples the process's anonymous resident memory until stopped, keeping the most seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Option<f64>>,
}

impl Sampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak: Option<f64> = None;
            loop {
                if let Some(mb) = status_mb("RssAnon:") {
                    peak = Some(peak.map_or(mb, |p| p.max(mb)));
                }
                if stopped.load(Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { stop, thread }
    }

    /// The most anonymous memory seen, in MB; `None` if it could not be read.
    fn stop(self) -> Option<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().ok().flatten()
    }
}

/// Bytes this process has had written to storage so far: `/proc/self/io`'s `write_bytes`
/// less `cancelled_write_bytes` (pages dirtied in files deleted before they were written back,
/// which never reached the disk). Buffered writes count when their pages are dirtied, so the
/// figure does not wait for writeback.
///
/// # Errors
/// If the file or either field cannot be read: the job fails rather than report no figure.
fn disk_written() -> Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    let field = |name: &str| -> Result<u64> {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("/proc/self/io has no {name}").into())
    };
    Ok(field("write_bytes:")?.saturating_sub(field("cancelled_write_bytes:")?))
}

/// A `kB` figure of `/proc/self/status` (`field` with its colon), in MB.
fn status_mb(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024.0 / 1e6)
}

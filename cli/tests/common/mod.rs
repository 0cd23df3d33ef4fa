//! What the CLI's test files share: reading a database directory byte for byte, to show that a
//! command which should only look changed nothing.

use std::collections::BTreeMap;
use std::path::Path;

/// Every file's name and bytes (a database directory has no subdirectories).
pub fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| {
            let path = e.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&path).expect("read"))
        })
        .collect()
}

/// The names of the files added, removed or changed from `before` to `after`.
pub fn changed(
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut names: Vec<String> = before
        .iter()
        .filter(|(name, bytes)| after.get(*name) != Some(*bytes))
        .map(|(name, _)| name.clone())
        .collect();
    names.extend(after.keys().filter(|n| !before.contains_key(*n)).cloned());
    names
}

/// How a refusal names this process as the holder of a database's lock: by pid where the
/// system keeps a lock table (`/proc/locks`) that speaks in this process's pid numbers, else as
/// another process.
#[allow(
    dead_code,
    reason = "not every test file that shares this module looks at locks"
)]
pub fn this_process_as_holder() -> String {
    let pid = std::process::id().to_string();
    let own_numbers = std::fs::read_link("/proc/self").is_ok_and(|own| own.to_str() == Some(&pid));
    if own_numbers && Path::new("/proc/locks").exists() {
        format!("process {pid}")
    } else {
        "another process".to_owned()
    }
}

//! `cairn-bench` (being written).
fn main() {}

//! The picker (being written).

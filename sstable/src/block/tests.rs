use bytes::Bytes;

use super::{Block, BlockBuilder};
use crate::error::Origin;
use crate::key::{Kind, internal_key, seek_key};

fn build(keys: &[Vec<u8>], interval: usize) -> Block {
    let mut builder = BlockBuilder::new(interval);
    for (i, key) in keys.iter().enumerate() {
        builder.add(key, &[format!("v{i}").as_bytes()]);
    }
    Block::new(Bytes::copy_from_slice(builder.finish()), Origin::default()).expect("valid block")
}

fn keys(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| internal_key(format!("key{i:05}").as_bytes(), 7, Kind::Put))
        .collect()
}

#[test]
fn forward_and_backward_scans_see_every_entry_in_order() -> crate::Result<()> {
    for interval in [1, 2, 16] {
        let keys = keys(100);
        let block = build(&keys, interval);
        let mut iter = block.iter();
        iter.seek_to_first()?;
        for key in &keys {
            assert!(iter.valid());
            assert_eq!(iter.key(), key.as_slice());
            iter.next()?;
        }
        assert!(!iter.valid());
        iter.seek_to_last()?;
        for (i, key) in keys.iter().enumerate().rev() {
            assert_eq!(iter.key(), key.as_slice());
            assert_eq!(iter.value(), format!("v{i}").as_bytes());
            iter.prev()?;
        }
        assert!(!iter.valid());
    }
    Ok(())
}

#[test]
fn seek_lands_on_the_first_key_at_or_after_the_target() -> crate::Result<()> {
    let keys = keys(50);
    let block = build(&keys, 4);
    let mut iter = block.iter();
    for i in 0..50 {
        iter.seek(&seek_key(format!("key{i:05}").as_bytes(), 100))?;
        assert_eq!(
            iter.key(),
            keys.get(i).map(Vec::as_slice).unwrap_or_default()
        );
        // Between keys: "key00007x" sorts after key00007 and before key00008.
        iter.seek(&seek_key(format!("key{i:05}x").as_bytes(), 100))?;
        match keys.get(i + 1) {
            Some(next) => assert_eq!(iter.key(), next.as_slice()),
            None => assert!(!iter.valid()),
        }
    }
    iter.seek(&seek_key(b"", 100))?;
    assert_eq!(
        iter.key(),
        keys.first().map(Vec::as_slice).unwrap_or_default()
    );
    Ok(())
}

#[test]
fn empty_block_is_never_valid() -> crate::Result<()> {
    let block = build(&[], 16);
    let mut iter = block.iter();
    iter.seek_to_first()?;
    assert!(!iter.valid());
    iter.seek_to_last()?;
    assert!(!iter.valid());
    iter.seek(b"anything")?;
    assert!(!iter.valid());
    Ok(())
}

#[test]
fn truncated_or_garbage_blocks_are_errors_not_panics() {
    let keys = keys(20);
    let mut builder = BlockBuilder::new(4);
    for key in &keys {
        builder.add(key, &[b"value"]);
    }
    let good = builder.finish().to_vec();
    // Every strict prefix of the block is an error: on open, or while reading it through.
    for cut in 0..good.len() {
        let bytes = Bytes::copy_from_slice(good.get(..cut).unwrap_or_default());
        assert!(
            read_whole(bytes).is_err(),
            "a block cut to {cut} of {} bytes read without an error",
            good.len()
        );
    }
    assert!(
        read_whole(Bytes::from(good)).is_ok(),
        "the whole block reads"
    );
    // Garbage never panics, whatever it yields.
    for seed in 0..200u8 {
        let garbage: Vec<u8> = (0..64u8)
            .map(|i| i.wrapping_mul(31).wrapping_add(seed))
            .collect();
        let _ = read_whole(Bytes::from(garbage));
    }
}

/// Opens `bytes` as a block and reads every entry forward, then seeks: the first error, if any.
fn read_whole(bytes: Bytes) -> crate::Result<()> {
    let block = Block::new(bytes, Origin::default())?;
    let mut iter = block.iter();
    iter.seek_to_first()?;
    let mut steps = 0;
    while iter.valid() && steps < 1_000 {
        iter.next()?;
        steps += 1;
    }
    iter.seek_to_last()?;
    iter.seek(&seek_key(b"key00010", 1))?;
    Ok(())
}

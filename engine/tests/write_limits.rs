//! Writes the engine cannot take are refused before anything is written, and the database goes
//! on.

use cairn::{Db, Error, MAX_VALUE_LEN, Options, WriteBatch};

#[test]
fn a_batch_over_the_log_record_limit_is_refused_and_the_database_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("before", "1").expect("put");
    // Five values at the limit: each is legal, the batch (1.25 GiB) is over the log's 1 GiB.
    let value = vec![7u8; MAX_VALUE_LEN];
    let mut batch = WriteBatch::new();
    for i in 0..5 {
        batch.put(format!("big{i}"), &value);
    }
    drop(value);
    let refused = db.write(batch);
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    db.put("after", "2").expect("the database goes on");
    assert_eq!(db.get("before").expect("get").as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get("after").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(
        db.get("big0").expect("get"),
        None,
        "nothing of the batch was written"
    );
    drop(db);
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get("big0").expect("get"), None);
    assert_eq!(db.get("after").expect("get").as_deref(), Some(&b"2"[..]));
}

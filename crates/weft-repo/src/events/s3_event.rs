//! The changes an event message names, from the shapes S3 sends to a queue: its own
//! notifications (`{"Records": [...]}`, keys URL-encoded with `+` for spaces), the same
//! wrapped by SNS (`{"Type": "Notification", "Message": "<the S3 JSON>"}`), EventBridge's
//! (`{"source": "aws.s3", "detail-type": "Object Created", "detail": {...}}`, keys as they
//! are), and the test event S3 sends when a notification is configured (no change).

use serde_json::Value;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Created or overwritten (`ObjectCreated:*`).
    Created,
    /// Deleted (`ObjectRemoved:*`, `LifecycleExpiration:*`).
    Removed,
    /// Every object under the key as a directory (`KEY/...`) appeared at once: a directory
    /// renamed into place in a hierarchical namespace (Azure Data Lake Storage).
    DirectoryCreated,
    /// Every object under the key as a directory is gone: a directory deleted or renamed
    /// away in a hierarchical namespace.
    DirectoryRemoved,
}

/// One object's change, as a message tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The bucket.
    pub bucket: String,
    /// The object's key, decoded.
    pub key: String,
    /// What happened.
    pub kind: ChangeKind,
}

/// The changes message `body` names (none for the test event and other event types);
/// an error says why a body is none of the shapes above. A record with a bad key is left
/// out (with a warning): the sweep finds that object.
pub fn changes(body: &str) -> Result<Vec<Change>, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    // SNS's envelope: the S3 message as a string.
    if v.get("Type").and_then(Value::as_str) == Some("Notification") {
        let inner = v
            .get("Message")
            .and_then(Value::as_str)
            .ok_or("an SNS notification without a Message")?;
        return changes(inner);
    }
    if v.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        return Ok(Vec::new());
    }
    if v.get("source").and_then(Value::as_str) == Some("aws.s3") {
        return eventbridge(&v);
    }
    let records = v
        .get("Records")
        .and_then(Value::as_array)
        .ok_or("neither S3 records, an SNS notification nor an EventBridge event")?;
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let name = r.get("eventName").and_then(Value::as_str).unwrap_or("");
        let Some(kind) = kind_of(name) else { continue };
        let s3 = r.get("s3");
        let bucket = s3
            .and_then(|s| s.pointer("/bucket/name"))
            .and_then(Value::as_str);
        let key = s3
            .and_then(|s| s.pointer("/object/key"))
            .and_then(Value::as_str);
        let (Some(bucket), Some(key)) = (bucket, key) else {
            return Err(format!("a {name} record without a bucket name or key"));
        };
        match decode_key(key) {
            Some(key) => out.push(Change {
                bucket: bucket.to_string(),
                key,
                kind,
            }),
            None => tracing::warn!(key, "event: a key that does not decode to UTF-8"),
        }
    }
    Ok(out)
}

/// The change an event type means, if one the import follows.
fn kind_of(event_name: &str) -> Option<ChangeKind> {
    let name = event_name.strip_prefix("s3:").unwrap_or(event_name);
    if name.starts_with("ObjectCreated:") {
        Some(ChangeKind::Created)
    } else if name.starts_with("ObjectRemoved:") || name.starts_with("LifecycleExpiration:") {
        Some(ChangeKind::Removed)
    } else {
        None
    }
}

/// An EventBridge event of S3.
fn eventbridge(v: &Value) -> Result<Vec<Change>, String> {
    let kind = match v.get("detail-type").and_then(Value::as_str) {
        Some("Object Created") => ChangeKind::Created,
        Some("Object Deleted") => ChangeKind::Removed,
        _ => return Ok(Vec::new()),
    };
    let bucket = v.pointer("/detail/bucket/name").and_then(Value::as_str);
    let key = v.pointer("/detail/object/key").and_then(Value::as_str);
    match (bucket, key) {
        (Some(bucket), Some(key)) => Ok(vec![Change {
            bucket: bucket.to_string(),
            key: key.to_string(),
            kind,
        }]),
        _ => Err("an EventBridge S3 event without a bucket name or key".into()),
    }
}

/// A key as S3 notifications write it: form-encoded (`+` is a space, `%XX` a byte);
/// `None` when the bytes are not UTF-8 or an escape is broken.
pub fn decode_key(encoded: &str) -> Option<String> {
    percent_decode(encoded, true)
}

/// `encoded` with its `%XX` escapes decoded (and `+` as a space when `plus_is_space`, as
/// in form encoding); `None` when the bytes are not UTF-8 or an escape is broken.
pub(crate) fn percent_decode(encoded: &str, plus_is_space: bool) -> Option<String> {
    let b = encoded.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(name: &str, bucket: &str, key: &str) -> Value {
        serde_json::json!({
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "eventName": name,
            "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 3}}
        })
    }

    #[test]
    fn s3_records_name_created_and_removed_objects() {
        let body = serde_json::json!({ "Records": [
            record("ObjectCreated:Put", "b", "data/a+b%2Bc.txt"),
            record("ObjectRemoved:Delete", "b", "data/x"),
            record("ObjectRestore:Completed", "b", "data/y"),
            record("LifecycleExpiration:Delete", "b", "data/z"),
            record("ObjectCreated:CompleteMultipartUpload", "b", "data/%C3%A9t%C3%A9"),
        ]})
        .to_string();
        let c = changes(&body).unwrap();
        let got: Vec<(&str, ChangeKind)> = c.iter().map(|c| (c.key.as_str(), c.kind)).collect();
        assert_eq!(
            got,
            [
                ("data/a b+c.txt", ChangeKind::Created),
                ("data/x", ChangeKind::Removed),
                ("data/z", ChangeKind::Removed),
                ("data/été", ChangeKind::Created),
            ]
        );
        assert!(c.iter().all(|c| c.bucket == "b"));
    }

    #[test]
    fn sns_envelopes_eventbridge_and_test_events() {
        let inner = serde_json::json!({ "Records": [record("ObjectCreated:Copy", "b", "k")] });
        let sns = serde_json::json!({"Type": "Notification", "Message": inner.to_string()});
        assert_eq!(changes(&sns.to_string()).unwrap()[0].key, "k");
        let eb = serde_json::json!({
            "source": "aws.s3", "detail-type": "Object Deleted",
            "detail": {"bucket": {"name": "b"}, "object": {"key": "raw key+"}}
        });
        let c = changes(&eb.to_string()).unwrap();
        assert_eq!(
            (c[0].key.as_str(), c[0].kind),
            ("raw key+", ChangeKind::Removed)
        );
        let test = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"b"}"#;
        assert!(changes(test).unwrap().is_empty());
    }

    #[test]
    fn bad_bodies_are_errors_and_bad_keys_are_left_out() {
        for bad in [
            "",
            "nope",
            "[]",
            "{}",
            r#"{"Type":"Notification"}"#,
            r#"{"Records":[{"eventName":"ObjectCreated:Put"}]}"#,
        ] {
            assert!(changes(bad).is_err(), "{bad:?}");
        }
        let body = serde_json::json!({ "Records": [
            record("ObjectCreated:Put", "b", "bad%zz"),
            record("ObjectCreated:Put", "b", "not-utf8%FF"),
            record("ObjectCreated:Put", "b", "cut%4"),
            record("ObjectCreated:Put", "b", "good"),
        ]})
        .to_string();
        let c = changes(&body).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].key, "good");
    }

    proptest! {
        /// Whatever the key, its form encoding (S3's, Python's `quote_plus`) decodes back.
        #[test]
        fn form_encoded_keys_decode_back(key in "\\PC{0,64}") {
            let encoded: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
            prop_assert_eq!(decode_key(&encoded), Some(key));
        }

        /// Any input decodes or not without panicking.
        #[test]
        fn any_input_decodes_or_not(s in ".{0,64}") {
            let _ = decode_key(&s);
        }
    }
}

//! The golden records' informational attributes: attributes today's handler writes on every
//! record that the golden records of its format lack, because no decision reads them (see the
//! golden records' README).

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::lease::LeaseStore;
use cfn_once_tests::{LocalRegion, Options};

use super::{CONTROL_CLASS, Item, decisions, golden, key_of, put, text};

/// Attributes today's handler writes that the golden records of its format may lack, each with the
/// type it has and why it needed no new format. Such an attribute is for the people who read the
/// table: no decision reads it (`an_informational_attribute_changes_no_decision`), so a handler
/// of the same format that writes none misreads nothing, and what it leaves behind stays true.
/// Every record today's handler writes carries each of them (checked below), so the list cannot
/// hide a field that stopped being written.
pub(super) const INFORMATIONAL: &[(&str, &str, &str)] = &[(
    "writer",
    "S",
    "since 0.2.0, the version that wrote the record and the `updated_ms` of its write \
     (`lease::writer_stamp`); a 0.1.0 handler neither reads nor writes it, and after its write \
     the stamp's time is no longer the record's `updated_ms`, which `LeaseRecord::written_by` \
     reads as an older writer",
)];

/// What is wrong with the informational attributes of a record today's handler wrote: each must
/// be there, and the writer's stamp must name this version and the record's `updated_ms`.
pub(super) fn informational_differences(item: &Item) -> Vec<String> {
    let mut differences: Vec<String> = INFORMATIONAL
        .iter()
        .filter(|(name, _, _)| !item.contains_key(*name))
        .map(|(name, _, _)| format!("`{name}` is not written (INFORMATIONAL says every record has it)"))
        .collect();
    let stamp = text(item, "writer");
    let updated = item.get("updated_ms").and_then(|v| v.as_n().ok()).map_or("", String::as_str);
    let want = format!("{}@{updated}", cfn_once_core::build::VERSION);
    if item.contains_key("writer") && stamp != want {
        differences.push(format!("`writer` is {stamp:?}, not {want:?}"));
    }
    differences
}

/// The informational attributes (`INFORMATIONAL`) change nothing the protocol does: every golden
/// record (none of which has them) is read and decided on the same with a stamp of today's
/// version, with a stamp of an older write, and with an unreadable one; and `written_by` names
/// the writer only where the stamp's time is the record's `updated_ms`.
#[tokio::test]
async fn an_informational_attribute_changes_no_decision() {
    let region = LocalRegion::new(Options::default()).await;
    let store = region.lease_store();
    let mut compared = 0;
    for golden in golden().into_iter().filter(|golden| golden.class != CONTROL_CLASS) {
        assert!(!golden.item.contains_key("writer"), "{}: a golden record with a writer", golden.name);
        put(&region, &golden.item).await;
        let bare = store.read(&key_of(&golden.item)).await.expect("read").expect("a record");
        assert_eq!(bare.written_by(), None, "{}: no stamp, no writer", golden.name);
        let updated = bare.updated_ms;
        let stamps = [
            (format!("{}@{updated}", cfn_once_core::build::VERSION), Some(cfn_once_core::build::VERSION)),
            (format!("0.2.0@{}", updated.saturating_sub(1)), None),
            ("not a stamp".to_owned(), None),
        ];
        for (stamp, by) in stamps {
            let mut item = golden.item.clone();
            item.insert("writer".to_owned(), AttributeValue::S(stamp.clone()));
            put(&region, &item).await;
            let stamped = store.read(&key_of(&item)).await.expect("read").expect("a record");
            assert_eq!(stamped.written_by(), by, "{} stamped {stamp:?}", golden.name);
            assert_eq!(
                stamped.writer.as_deref(),
                Some(stamp.as_str()),
                "{}: the stamp is read as written",
                golden.name
            );
            assert_eq!(
                decisions(&stamped),
                decisions(&bare),
                "{} stamped {stamp:?}: a decision reads the writer's stamp",
                golden.name
            );
            compared += 1;
        }
    }
    assert!(compared >= 30, "only {compared} stamped records compared");
}

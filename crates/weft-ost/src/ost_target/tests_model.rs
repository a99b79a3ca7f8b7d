//! A model test: one object behaves like a byte vector under writes, truncations and
//! reads, with a data version that moves on every change and only then — over the
//! file-system store (plain and compressed objects) and over the in-memory fake alike.

use super::tests::{new_ost, oid, opts};
use super::*;
use crate::store::memory::MemoryStore;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, len: usize, fill: u8 },
    Punch { size: u64 },
    Read { offset: u64, len: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..200_000, 0usize..20_000, any::<u8>()).prop_map(|(offset, len, fill)| Op::Write {
            offset,
            len,
            fill
        }),
        (0u64..250_000).prop_map(|size| Op::Punch { size }),
        (0u64..250_000, 0u32..50_000).prop_map(|(offset, len)| Op::Read { offset, len }),
    ]
}

/// Runs `ops` on a new object of `ost`, checking each against the model.
fn check_model(ost: &Arc<Ost>, ops: Vec<Op>) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let id = oid(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut model: Option<Vec<u8>> = None;
        let mut last_version = 0;
        for op in ops {
            match op {
                Op::Write { offset, len, fill } => {
                    let a = ost
                        .write(id, offset, Bytes::from(vec![fill; len]), false)
                        .await
                        .unwrap();
                    let m = model.get_or_insert_with(Vec::new);
                    let end = offset as usize + len;
                    if m.len() < end {
                        m.resize(end, 0);
                    }
                    m[offset as usize..end].fill(fill);
                    assert_eq!(a.size, m.len() as u64);
                    assert!(a.data_version > last_version);
                    last_version = a.data_version;
                }
                Op::Punch { size } => {
                    let a = ost.punch(id, size).await.unwrap();
                    model.get_or_insert_with(Vec::new).resize(size as usize, 0);
                    assert_eq!(a.size, size);
                    assert!(a.data_version > last_version);
                    last_version = a.data_version;
                }
                Op::Read { offset, len } => {
                    let (a, data) = ost.read(id, offset, len).await.unwrap();
                    match &model {
                        None => {
                            assert!(!a.exists);
                            assert!(data.is_empty());
                        }
                        Some(m) => {
                            let start = (offset as usize).min(m.len());
                            let end = (offset as usize + len as usize).min(m.len());
                            assert_eq!(&data[..], &m[start..end]);
                            assert_eq!(a.data_version, last_version);
                        }
                    }
                }
            }
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn object_behaves_like_a_byte_vector(ops in proptest::collection::vec(op(), 1..40)) {
        // One target for all cases (formatting costs several fsyncs), a new object each.
        static SHARED: std::sync::LazyLock<(tempfile::TempDir, Arc<Ost>)> =
            std::sync::LazyLock::new(new_ost);
        check_model(&SHARED.1, ops);
    }

    #[test]
    fn compressed_object_behaves_like_a_byte_vector(ops in proptest::collection::vec(op(), 1..40)) {
        static SHARED: std::sync::LazyLock<(tempfile::TempDir, Arc<Ost>)> =
            std::sync::LazyLock::new(|| {
                let (dir, ost) = new_ost();
                ost.set_compress(true).unwrap();
                (dir, ost)
            });
        check_model(&SHARED.1, ops);
    }

    #[test]
    fn object_in_memory_behaves_like_a_byte_vector(ops in proptest::collection::vec(op(), 1..40)) {
        static SHARED: std::sync::LazyLock<Arc<Ost>> = std::sync::LazyLock::new(|| {
            Ost::with_store(Arc::new(MemoryStore::new()), opts()).unwrap()
        });
        check_model(&SHARED, ops);
    }
}
